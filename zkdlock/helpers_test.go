package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// testTTL is the session timeout of the tests' clients, and so their lease
// length: the shortest that survives a loaded machine running -race.
const testTTL = time.Second

// testCtx is the watchdog of a test: every wait is bounded by it.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// connOpts configure dialZK.
type connOpts struct {
	timeout time.Duration
	onEvent func(zk.Event) // called for every event, in go-zookeeper's receive loop
	dialer  zk.Dialer      // default net.DialTimeout
}

// dialZK connects to addr and waits for a session; the connection is closed
// when the test ends.
func dialZK(t testing.TB, ctx context.Context, addr string, o connOpts) *zk.Conn {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = testTTL
	}
	session := make(chan struct{}, 1)
	opts := list(
		zk.WithLogger(quietLogger{}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				select {
				case session <- struct{}{}:
				default:
				}
			}
			if o.onEvent != nil {
				o.onEvent(ev)
			}
		}),
	)
	if o.dialer != nil {
		opts = append(opts, zk.WithDialer(o.dialer))
	}
	conn, _, err := zk.Connect([]string{addr}, o.timeout, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	select {
	case <-session:
	case <-ctx.Done():
		t.Fatalf("no ZooKeeper session with %s (watchdog)", addr)
	}
	return conn
}

// list makes a slice of go-zookeeper's options, whose type is unexported.
func list[T any](xs ...T) []T { return xs }

// newClient builds a Client on conn with New. The test server is a
// standalone ZooKeeper, and the Clients find that out as users' do
// (Deployment Detect, the default) unless o says otherwise: the tests that
// count requests then pin the recipe as it runs on a standalone server (New's
// check, one request, comes before they count). The ensemble rule, which
// makes a grant prove that the leader heard from the session (heard.go), has
// tests of its own (ensemble_test.go, with Deployment Ensemble), and so has
// the detection (standalone_test.go).
func newClient(t testing.TB, ctx context.Context, conn zkdlock.Conn, o zkdlock.Options) *dlock.Client {
	t.Helper()
	if o.SessionTimeout == 0 {
		o.SessionTimeout = testTTL
	}
	if o.LockDelaySweep == 0 {
		// No sweep of the lock-delay index lands in a test's counted
		// requests; the sweep's own tests set it.
		o.LockDelaySweep = time.Hour
	}
	c, err := zkdlock.New(ctx, conn, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// plainClient builds a Client on a connection of its own to addr, with
// default connection options.
func plainClient(t *testing.T, ctx context.Context, addr string, o zkdlock.Options) *dlock.Client {
	t.Helper()
	return newClient(t, ctx, dialZK(t, ctx, addr, connOpts{}), o)
}

// mustLock takes key with c.Lock, failing the test if it cannot.
func mustLock(t *testing.T, ctx context.Context, c *dlock.Client, key string) *dlock.Lease {
	t.Helper()
	l, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mustUnlock releases l, failing the test if it cannot.
func mustUnlock(t *testing.T, ctx context.Context, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkNothingLeft fails the test if a lock node is left under path.
func checkNothingLeft(t *testing.T, admin *zk.Conn, path string) {
	t.Helper()
	if names := children(t, admin, path); len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
}

var rootSeq atomic.Int64

// testRoot returns a root node unique to the test, so that tests do not see
// each other's keys.
func testRoot(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/test/%s-%d", name, rootSeq.Add(1))
}

// waitWaiters waits until Inspect shows n waiters on key.
func waitWaiters(t *testing.T, ctx context.Context, c *dlock.Client, key string, n int) *dlock.LockInfo {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", key, err)
		}
		if len(info.Waiters) == n {
			return info
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("key %q: %d waiters, want %d (watchdog)", key, len(info.Waiters), n)
		}
	}
}

// children lists the lock nodes of a key, or nil if the key node is gone.
func children(t *testing.T, admin *zk.Conn, path string) []string {
	t.Helper()
	c, _, err := admin.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatalf("children of %s: %v", path, err)
	}
	return c
}

// waitDone waits for a lease to end, failing at the watchdog.
func waitDone(t *testing.T, ctx context.Context, l *dlock.Lease, why string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatalf("lease on %q not lost after %s (watchdog)", l.Key(), why)
	}
}

// hookConn wraps a zk.Conn to count requests and inject faults, the way a
// flaky network or a badly timed release would.
type hookConn struct {
	zkdlock.Conn
	lists    atomic.Int64 // getChildren calls
	creates  atomic.Int64 // create calls that made a node on the server
	getWs    atomic.Int64 // getData-with-watch calls that returned
	requests atomic.Int64 // every request sent, of any kind
	multis   atomic.Int64 // multi calls: creates, releases, Publish
	syncs    atomic.Int64 // sync calls
	checks   atomic.Int64 // getData calls on /zookeeper/config: standalone checks
	// containers counts createContainer calls: each follows a listing or
	// a create that found no key node (never made, or reaped empty).
	containers atomic.Int64
	// deletes counts plain deletes.
	deletes atomic.Int64
	// proofs counts the answered requests that prove a session alive and
	// nothing else: exists, sync, and getData of /zookeeper/config.
	proofs atomic.Int64

	// dropCreateReplies makes that many creates succeed on the server and
	// then fail with zk.ErrConnectionClosed, as when the connection breaks
	// before the reply arrives.
	dropCreateReplies atomic.Int32
	// dropReleaseReplies does the same to that many multis that create
	// nothing (releases).
	dropReleaseReplies atomic.Int32
	// onCreate, when set before the client uses the conn, runs after a
	// create reached the server and before its reply is returned.
	onCreate func(path string, err error)
	// beforeGetW, when set before the client uses the conn, runs before
	// every getData-with-watch.
	beforeGetW func(path string)
	// afterGetW, when set, runs after a getData-with-watch returned and
	// before its caller sees the result.
	afterGetW atomic.Pointer[func(path string)]
	// beforeMulti and afterMulti, when set, run before every multi and
	// after it returned, before its caller sees the result.
	beforeMulti atomic.Pointer[func(ops []any)]
	afterMulti  atomic.Pointer[func(ops []any, err error)]
	// beforeDelete and afterDelete, the same for every plain delete.
	beforeDelete atomic.Pointer[func(path string)]
	afterDelete  atomic.Pointer[func(path string, err error)]
}

func (h *hookConn) Children(path string) ([]string, *zk.Stat, error) {
	h.requests.Add(1)
	h.lists.Add(1)
	return h.Conn.Children(path)
}

func (h *hookConn) ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	h.requests.Add(1)
	h.lists.Add(1)
	return h.Conn.ChildrenW(path)
}

// Multi is how zkdlock creates its lock nodes (with a setData on the key
// node, for the creation zxid): the create hooks apply to it.
func (h *hookConn) Multi(ops ...any) (rs []zk.MultiResponse, err error) {
	h.requests.Add(1)
	h.multis.Add(1)
	if f := h.beforeMulti.Load(); f != nil {
		(*f)(ops)
	}
	if f := h.afterMulti.Load(); f != nil {
		defer func() { (*f)(ops, err) }()
	}
	if len(ops) == 0 {
		return h.Conn.Multi(ops...)
	}
	if _, ok := ops[0].(*zk.CreateRequest); !ok {
		rs, err = h.Conn.Multi(ops...)
		if err == nil && h.dropReleaseReplies.Add(-1) >= 0 {
			return nil, zk.ErrConnectionClosed
		}
		return rs, err
	}
	rs, err = h.Conn.Multi(ops...)
	p := ""
	if err == nil {
		h.creates.Add(1)
		p = rs[0].String
	}
	if h.onCreate != nil {
		h.onCreate(p, err)
	}
	if err == nil && h.dropCreateReplies.Add(-1) >= 0 {
		return nil, zk.ErrConnectionClosed
	}
	return rs, err
}

func (h *hookConn) CreateContainer(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	h.requests.Add(1)
	h.containers.Add(1)
	return h.Conn.CreateContainer(path, data, flags, acl)
}

func (h *hookConn) Delete(path string, version int32) (err error) {
	h.requests.Add(1)
	h.deletes.Add(1)
	if f := h.beforeDelete.Load(); f != nil {
		(*f)(path)
	}
	if f := h.afterDelete.Load(); f != nil {
		defer func() { (*f)(path, err) }()
	}
	return h.Conn.Delete(path, version)
}

func (h *hookConn) Exists(path string) (bool, *zk.Stat, error) {
	h.requests.Add(1)
	defer h.proofs.Add(1)
	return h.Conn.Exists(path)
}

func (h *hookConn) ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error) {
	h.requests.Add(1)
	return h.Conn.ExistsW(path)
}

func (h *hookConn) Get(path string) ([]byte, *zk.Stat, error) {
	h.requests.Add(1)
	if path == "/zookeeper/config" {
		h.checks.Add(1)
		defer h.proofs.Add(1)
	}
	return h.Conn.Get(path)
}

func (h *hookConn) GetACL(path string) ([]zk.ACL, *zk.Stat, error) {
	h.requests.Add(1)
	return h.Conn.GetACL(path)
}

func (h *hookConn) Sync(path string) (string, error) {
	h.requests.Add(1)
	h.syncs.Add(1)
	defer h.proofs.Add(1)
	return h.Conn.Sync(path)
}

func (h *hookConn) Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	h.requests.Add(1)
	p, err := h.Conn.Create(path, data, flags, acl)
	if err == nil {
		h.creates.Add(1)
	}
	if h.onCreate != nil {
		h.onCreate(p, err)
	}
	if err == nil && h.dropCreateReplies.Add(-1) >= 0 {
		return "", zk.ErrConnectionClosed
	}
	return p, err
}

func (h *hookConn) GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	h.requests.Add(1)
	if h.beforeGetW != nil {
		h.beforeGetW(path)
	}
	data, stat, ch, err := h.Conn.GetW(path)
	h.getWs.Add(1)
	if f := h.afterGetW.Load(); f != nil {
		(*f)(path)
	}
	return data, stat, ch, err
}

// waiterRun is n Lock calls on one key, started together, each releasing as
// soon as it is granted; it records the tokens in the order of the grants.
type waiterRun struct {
	n      int
	errc   chan error
	mu     sync.Mutex
	tokens []uint64 // guarded by mu
}

// startWaiters starts the n Lock calls, waiter i on client(i).
func startWaiters(ctx context.Context, key string, n int, client func(i int) *dlock.Client) *waiterRun {
	w := &waiterRun{n: n, errc: make(chan error, n)}
	for i := range n {
		go func() {
			l, err := client(i).Lock(ctx, key)
			if err != nil {
				w.errc <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			w.mu.Lock()
			w.tokens = append(w.tokens, l.Token())
			w.mu.Unlock()
			w.errc <- l.Unlock(ctx)
		}()
	}
	return w
}

// servedInOrder waits until every waiter has been served, and checks that
// they were served in arrival order: the fencing token, the node's creation
// zxid, goes up from grant to grant exactly when the grants follow creation
// order.
func (w *waiterRun) servedInOrder(t *testing.T, ctx context.Context) {
	t.Helper()
	for range w.n {
		select {
		case err := <-w.errc:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			w.mu.Lock()
			t.Fatalf("%d of %d waiters served (watchdog)", len(w.tokens), w.n)
		}
	}
	for i := 1; i < len(w.tokens); i++ {
		if w.tokens[i] <= w.tokens[i-1] {
			t.Fatalf("grant %d has token %d after %d: not in arrival order", i, w.tokens[i], w.tokens[i-1])
		}
	}
}
