package gwtest

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
	_ "github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/gateway"
	"github.com/dlockdev/dlock/internal/testing/leakcheck"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	_ "github.com/dlockdev/dlock/redisdlock"
	_ "github.com/dlockdev/dlock/zkdlock"
)

// redisAddr is the Redis every test of the package shares, each on keys
// of its own.
var redisAddr string

func TestMain(m *testing.M) {
	addr, stop, err := testserver.StartRedisForMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gwtest:", err)
		os.Exit(1)
	}
	redisAddr = addr
	code := m.Run()
	stop()
	testserver.StopSharedEtcd()
	testserver.StopSharedZooKeeper() // a JVM: not a goroutine of ours
	if code == 0 {
		if err := leakcheck.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "gwtest:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// waitFor bounds every wait of the tests: a condition not met by then
// fails the test, as a hang would otherwise.
const waitFor = 20 * time.Second

// env is a gateway in front of the shared Redis, served by httptest, and
// a Client of its own (the library used directly) to look at the backend.
type env struct {
	t      *testing.T
	gw     *gateway.Gateway
	srv    *httptest.Server
	direct *dlock.Client
	prefix string
	// client and header, when set, send the requests of do and try:
	// another TLS configuration, credentials.
	client *http.Client
	header http.Header
}

var keySeq atomic.Int64

func newEnv(t *testing.T, opts ...gateway.Option) *env {
	t.Helper()
	return newEnvOn(t, "redis://"+redisAddr+"/0", opts...)
}

// newEnvOn is newEnv in front of the backend at url.
func newEnvOn(t *testing.T, url string, opts ...gateway.Option) *env {
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
	gw, err := gateway.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		if err := gw.Close(context.Background()); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
		c.Close()
		direct.Close()
	})
	return &env{t: t, gw: gw, srv: srv, direct: direct, prefix: fmt.Sprintf("gw/%s/%d/", t.Name(), keySeq.Add(1))}
}

func (e *env) key(name string) string { return e.prefix + name }

// reply is a decoded JSON reply.
type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r reply) str(field string) string {
	s, _ := r.body[field].(string)
	return s
}

func (r reply) num(field string) int64 {
	f, _ := r.body[field].(float64)
	return int64(f)
}

// code is the error reply's code.
func (r reply) code() string {
	e, _ := r.body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// do sends a request with a JSON body (a string as is, anything else
// marshalled) and decodes the reply.
func (e *env) do(ctx context.Context, method, path string, body any) reply {
	e.t.Helper()
	r, err := e.try(ctx, method, path, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (e *env) try(ctx context.Context, method, path string, body any) (reply, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return reply{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, rd)
	if err != nil {
		return reply{}, err
	}
	for k, v := range e.header {
		req.Header[k] = v
	}
	client := e.srv.Client()
	if e.client != nil {
		client = e.client
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			return r, fmt.Errorf("reply %q: %v", raw, err)
		}
	}
	return r, nil
}

func (e *env) acquire(body map[string]any) reply {
	e.t.Helper()
	return e.do(context.Background(), http.MethodPost, "/v1/acquire", body)
}

// want fails the test unless r has the status and, for an error, the code.
func (e *env) want(r reply, status int, code string) {
	e.t.Helper()
	if r.status != status || (code != "" && r.code() != code) {
		e.t.Fatalf("got %d %s, want %d %s", r.status, r.raw, status, code)
	}
}

// eventually waits until cond holds, at most waitFor.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(waitFor)
	for delay := time.Millisecond; !cond(); delay = min(2*delay, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("not within %v: %s", waitFor, what)
		}
		time.Sleep(delay) // polling the backend's state, which sends no event
	}
}

// info is the backend's view of key, through the library.
func (e *env) info(key string) *dlock.LockInfo {
	e.t.Helper()
	in, err := e.direct.Inspect(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

// redisKeys lists the Redis keys that mention the test's prefix.
func (e *env) redisKeys() string {
	e.t.Helper()
	out, err := testserver.RedisCommand(context.Background(), redisAddr, "KEYS", "*"+e.prefix+"*")
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) redis(args ...string) string {
	e.t.Helper()
	out, err := testserver.RedisCommand(context.Background(), redisAddr, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}
