package gwtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/gateway"
	"github.com/dlockdev/dlock/internal/testing/gwenv"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	_ "github.com/dlockdev/dlock/redisdlock"
	_ "github.com/dlockdev/dlock/zkdlock"
)

// redisAddr is the Redis every test of the package shares, each on keys
// of its own.
var redisAddr string

func TestMain(m *testing.M) { gwenv.Main(m, "gwtest", &redisAddr, nil) }

// otherBackends are the backends, but the shared Redis, that the tests of
// the gateway on every backend run on.
var otherBackends = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"etcd", func(t *testing.T) string { return testserver.SharedEtcd(t).URL() }},
	{"zk", func(t *testing.T) string { return "zk://" + testserver.SharedZooKeeper(t).Addr() }},
}

// waitFor bounds every wait of the tests: a condition not met by then
// fails the test, as a hang would otherwise.
const waitFor = 20 * time.Second

// env is a gateway in front of the shared Redis (gwenv.Env), and the
// gateway itself.
type env struct {
	*gwenv.Env
	gw *gateway.Gateway
	// client and reqHeader, when set, send the requests of do and try:
	// another TLS configuration, credentials.
	client    *http.Client
	reqHeader http.Header
}

func newEnv(t *testing.T, opts ...gateway.Option) *env {
	t.Helper()
	return newEnvOn(t, "redis://"+redisAddr+"/0", opts...)
}

// newEnvOn is newEnv in front of the backend at url.
func newEnvOn(t *testing.T, url string, opts ...gateway.Option) *env {
	t.Helper()
	return startEnv(t, url, nil, opts...)
}

// startEnv is newEnvOn with the server configured by configure (see
// gwenv.Start).
func startEnv(t *testing.T, url string, configure func(*httptest.Server), opts ...gateway.Option) *env {
	t.Helper()
	e := &env{}
	e.Env = gwenv.Start(t, url, "gw", func(c *dlock.Client) (gwenv.Gateway, error) {
		gw, err := gateway.New(c, opts...)
		e.gw = gw
		return gw, err
	}, configure)
	return e
}

// reply is a decoded JSON reply.
type reply = gwenv.Reply

// do sends a request with a JSON body (a string as is, anything else
// marshalled) and decodes the reply.
func (e *env) do(ctx context.Context, method, path string, body any) reply {
	e.T.Helper()
	r, err := e.try(ctx, method, path, body)
	if err != nil {
		e.T.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (e *env) try(ctx context.Context, method, path string, body any) (reply, error) {
	client := e.Srv.Client()
	if e.client != nil {
		client = e.client
	}
	return gwenv.Call(ctx, client, e.reqHeader, method, e.Srv.URL+path, body)
}

func (e *env) acquire(body map[string]any) reply {
	e.T.Helper()
	return e.do(context.Background(), http.MethodPost, "/v1/acquire", body)
}

// want fails the test unless r has the status and, for an error, the code.
func (e *env) want(r reply, status int, code string) {
	e.T.Helper()
	if r.Status != status || (code != "" && r.Code() != code) {
		e.T.Fatalf("got %d %s, want %d %s", r.Status, r.Raw, status, code)
	}
}

// eventually waits until cond holds, at most waitFor.
func (e *env) eventually(what string, cond func() bool) {
	e.T.Helper()
	gwenv.Eventually(e.T, waitFor, what, cond)
}

// redisKeys lists the Redis keys that mention the test's prefix.
func (e *env) redisKeys() string {
	e.T.Helper()
	out, err := testserver.RedisCommand(context.Background(), redisAddr, "KEYS", "*"+e.Prefix+"*")
	if err != nil {
		e.T.Fatal(err)
	}
	return out
}

func (e *env) redis(args ...string) string {
	e.T.Helper()
	out, err := testserver.RedisCommand(context.Background(), redisAddr, args...)
	if err != nil {
		e.T.Fatal(err)
	}
	return out
}
