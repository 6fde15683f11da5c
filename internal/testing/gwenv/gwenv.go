// Package gwenv is the test environment of the lock gateway's tests
// (gateway/internal/gwtest, its faults, clients/internal/clienttest): a
// TestMain with a shared Redis, a gateway served by httptest in front of a
// real backend with a Client of its own to look at it, and the HTTP calls
// with their decoded JSON replies.
//
// It takes the gateway as an interface, so that the root module, which
// holds it, does not require the gateway's.
package gwenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/leakcheck"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// Main runs the tests of m on a Redis of their own, whose address it sets
// in *redisAddr first; afterwards it runs cleanup (when not nil), stops the
// shared etcd and ZooKeeper the tests may have started, and exits, failing
// on goroutines the tests left running. name prefixes its messages.
func Main(m *testing.M, name string, redisAddr *string, cleanup func()) {
	addr, stop, err := testserver.StartRedisForMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
	*redisAddr = addr
	code := m.Run()
	stop()
	if cleanup != nil {
		cleanup()
	}
	testserver.StopSharedEtcd()
	testserver.StopSharedZooKeeper() // a JVM: not a goroutine of ours
	leakcheck.Exit(code)
}

// Gateway is what the tests need of a *gateway.Gateway.
type Gateway interface {
	http.Handler
	Close(ctx context.Context) error
}

// Env is a gateway in front of a backend, served by httptest, and a Client
// of its own (the library used directly) to look at the backend.
type Env struct {
	T      *testing.T
	Srv    *httptest.Server
	Direct *dlock.Client
	// Prefix starts the keys of the test's own (Key).
	Prefix string
}

var keySeq atomic.Int64

// Start opens two Clients of the backend at url, serves the gateway that
// newGateway makes of the first until the test ends, and returns the Env;
// its keys start with root. The server uses TLS when configure, called
// before it starts, gives it a TLS configuration.
func Start(t *testing.T, url, root string, newGateway func(*dlock.Client) (Gateway, error), configure func(*httptest.Server)) *Env {
	t.Helper()
	ctx := context.Background()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := newGateway(c)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(gw)
	if configure != nil {
		configure(srv)
	}
	if srv.TLS != nil {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		if err := gw.Close(context.Background()); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
		c.Close()
		direct.Close()
	})
	return &Env{T: t, Srv: srv, Direct: direct, Prefix: fmt.Sprintf("%s/%s/%d/", root, t.Name(), keySeq.Add(1))}
}

// Key is a key of the test's own.
func (e *Env) Key(name string) string { return e.Prefix + name }

// Info is the backend's view of key, through the library.
func (e *Env) Info(key string) *dlock.LockInfo {
	e.T.Helper()
	in, err := e.Direct.Inspect(context.Background(), key)
	if err != nil {
		e.T.Fatal(err)
	}
	return in
}

// Eventually waits until cond holds, failing the test after bound.
func Eventually(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for delay := time.Millisecond; !cond(); delay = min(2*delay, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", bound, what)
		}
		time.Sleep(delay) // polling the backend's state, which sends no event
	}
}

// Reply is a reply of the gateway, its JSON body decoded.
type Reply struct {
	Status int
	Header http.Header
	Body   map[string]any // a JSON reply's
	Raw    string
}

// Str is the body's string field, or "".
func (r Reply) Str(field string) string {
	s, _ := r.Body[field].(string)
	return s
}

// Num is the body's number field, or 0.
func (r Reply) Num(field string) int64 {
	f, _ := r.Body[field].(float64)
	return int64(f)
}

// Code is an error reply's code.
func (r Reply) Code() string {
	e, _ := r.Body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// Call sends a request to url with client, with header and a JSON body
// (nil for none, a string as is, anything else marshalled), and reads the
// reply, decoding a JSON one.
func Call(ctx context.Context, client *http.Client, header http.Header, method, url string, body any) (Reply, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return Reply{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return Reply{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, err
	}
	r := Reply{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			return r, fmt.Errorf("reply %q: %v", raw, err)
		}
	}
	return r, nil
}
