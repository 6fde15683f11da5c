package clienttest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock/httpfence"
)

// fenceTarget is where lang's example writes: a SQLite file seeded with two
// expired orders and an open one for Python, an httpfence-guarded orders
// service for Java. check returns what the store recorded: the highest
// token of the fence and how many orders were closed.
func fenceTarget(t *testing.T, lang string) (target string, check func() (token string, closed int)) {
	t.Helper()
	switch lang {
	case "python":
		db := filepath.Join(t.TempDir(), "orders.db")
		python(t, `
import sys; sys.path.insert(0, sys.argv[1])
import close_expired_orders as job, time
db = job.open_db(sys.argv[2])
now = time.time()
db.executemany("INSERT INTO orders (status, expires_at) VALUES ('open', ?)", [(now - 60,), (now - 1,), (now + 3600,)])
`, filepath.Join(clientsDir, "python/examples"), db)
		return db, func() (string, int) {
			var tok string
			var closed int
			out := python(t, `
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute("SELECT token FROM fences").fetchone()[0], db.execute("SELECT count(*) FROM orders WHERE status = 'closed'").fetchone()[0])
`, db)
			if _, err := fmt.Sscan(out, &tok, &closed); err != nil {
				t.Fatalf("%q: %v", out, err)
			}
			return tok, closed
		}
	case "java":
		var closed atomic.Int64
		var last atomic.Value
		fences := httpfence.New()
		mux := http.NewServeMux()
		mux.Handle("POST /orders/close-expired", fences.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			claim, _ := httpfence.FromContext(r.Context())
			last.Store(fmt.Sprint(claim.Token))
			closed.Add(2)
			fmt.Fprintln(w, "closed 2 orders")
		})))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL, func() (string, int) {
			tok, _ := last.Load().(string)
			return tok, int(closed.Load())
		}
	}
	t.Fatalf("no client %q", lang)
	return "", nil
}

// python runs a Python program and returns its output.
func python(t *testing.T, program string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool(t, "python3", "python3"), append([]string{"-c", program}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// The example's fenced write: the newer holder's is done, and the older
// holder's, whose lease has ended, is refused by the store.
func TestClient_fencedWrite(t *testing.T) {
	eachClient(t, func(t *testing.T, e *env, d *driver) {
		key := e.Key("k")
		target, check := fenceTarget(t, d.lang)
		old := d.ok(d.do("acquire old %s 5000 0", key))[0]
		d.ok(d.do("release old"))
		cur := d.ok(d.do("acquire cur %s 5000 0", key))[0]
		d.ok(d.do("fence cur %s", target))
		if r := d.do("fence old %s", target); len(r) != 1 || r[0] != "stale" {
			t.Fatalf("the old holder's write (token %s, below %s): %q, want stale", old, cur, r)
		}
		if tok, closed := check(); tok != cur || closed != 2 {
			t.Fatalf("store: fence token %s, %d orders closed; want %s and 2 (the current holder's write only)", tok, closed, cur)
		}
		d.ok(d.do("release cur"))
	})
}

// The examples' main: the job runs under the lock, writes fenced by the
// lease's token, and releases the lock.
func TestExample_closeExpiredOrders(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			e := newEnv(t)
			target, check := fenceTarget(t, lang)
			var cmd *exec.Cmd
			if lang == "python" {
				cmd = clientCommand(t, lang, filepath.Join(clientsDir, "python/examples/close_expired_orders.py"), e.Srv.URL, target)
			} else {
				cmd = clientCommand(t, lang, "CloseExpiredOrders", e.Srv.URL, target)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
			}
			tok, closed := check()
			if want := "closed 2 orders under token " + tok; strings.TrimSpace(string(out)) != want || closed != 2 {
				t.Fatalf("output %q, %d orders closed; want %q and 2", out, closed, want)
			}
			if in := e.Info("jobs/close-expired-orders"); len(in.Holders) != 0 {
				t.Fatalf("holders after the job: %+v", in.Holders)
			}
		})
	}
}
