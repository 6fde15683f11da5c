package zkdlock_test

// The seed's ZooKeeper lock (../shared/seeds/000_*.txt, class ZookeeperLock)
// has the right idea, ephemeral sequential nodes with a watch on the
// predecessor, and four well-known flaws. Each scenario below pins one of
// them. It runs against dlock, where it must pass, and against a faithful Go
// copy of the seed's Java code, where it must FAIL: a scenario that cannot
// catch the flaw it is named after proves nothing.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// faults are injected into one lock call.
type faults struct {
	// dropCreateReply: the create of the lock node succeeds on the server,
	// and its reply is lost (the connection broke).
	dropCreateReply bool
	// afterWatch runs in the locking goroutine once the watch on the
	// predecessor is set, with the caller's connection.
	afterWatch func(conn *zk.Conn)
}

// lockClient is one process using a lock recipe.
type lockClient interface {
	// lock takes key, waiting, and returns how to release it.
	lock(ctx context.Context, key string, f faults) (release func() error, err error)
	// keyPath is the node under which the recipe queues for key.
	keyPath(key string) string
}

type recipe struct {
	name      string
	newClient func(t *testing.T, ctx context.Context, srv *testserver.ZooKeeper, root string) lockClient
}

// --- dlock ---------------------------------------------------------------

type dlockClient struct {
	root string
	conn *zk.Conn
	hook *hookConn
	c    *dlock.Client
	mu   sync.Mutex // one lock call at a time: faults are per call
}

func newDlockClient(t *testing.T, ctx context.Context, srv *testserver.ZooKeeper, root string) lockClient {
	conn := dialZK(t, ctx, srv.Addr(), connOpts{})
	hook := &hookConn{Conn: conn}
	return &dlockClient{root: root, conn: conn, hook: hook, c: newClient(t, ctx, hook, zkdlock.Options{Root: root})}
}

func (d *dlockClient) keyPath(key string) string { return zkdlock.KeyPathForTest(d.root, key) }

func (d *dlockClient) lock(ctx context.Context, key string, f faults) (func() error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f.dropCreateReply {
		d.hook.dropCreateReplies.Store(1)
	}
	if f.afterWatch != nil {
		// The first watch a waiter sets is on its predecessor.
		var once sync.Once
		after := func(string) { once.Do(func() { f.afterWatch(d.conn) }) }
		d.hook.afterGetW.Store(&after)
		defer d.hook.afterGetW.Store(nil)
	}
	l, err := d.c.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(ctx) }, nil
}

// --- the seed ------------------------------------------------------------

// seedLock is ZookeeperLock, translated line by line. Java's wait/notify is
// a sync.Cond: a notify with nobody waiting is lost, as in Java.
type seedLock struct {
	zk     *zk.Conn
	zkNode string
	f      faults

	mu   sync.Mutex
	cond *sync.Cond
}

type seedClient struct {
	t    *testing.T
	addr string
	root string
	// conns are closed when the test ends, so that a session the seed
	// forgot to close does not outlive the test binary's goroutine check.
	mu    sync.Mutex
	locks []*seedLock
}

func newSeedClient(t *testing.T, ctx context.Context, srv *testserver.ZooKeeper, root string) lockClient {
	c := &seedClient{t: t, addr: srv.Addr(), root: root}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, l := range c.locks {
			l.zk.Close()
			l.mu.Lock()
			l.cond.Broadcast() // let a waiter stuck in wait() go
			l.mu.Unlock()
		}
	})
	return c
}

// keyPath: the seed uses "/" + key; here under the test's root.
func (c *seedClient) keyPath(key string) string { return c.root + "/" + key }

func (c *seedClient) lock(ctx context.Context, key string, f faults) (func() error, error) {
	// DemoController: try (ZookeeperLock lock = new ZookeeperLock(config)) —
	// a new ZooKeeper session for every lock call.
	l := &seedLock{f: f}
	l.cond = sync.NewCond(&l.mu)
	conn, _, err := zk.Connect([]string{c.addr}, 10*time.Second, zk.WithLogger(quietLogger{}),
		zk.WithEventCallback(l.process))
	if err != nil {
		return nil, err
	}
	l.zk = conn
	c.mu.Lock()
	c.locks = append(c.locks, l)
	c.mu.Unlock()
	// The test's root stands in for "/".
	for _, p := range []string{"/test", c.root} {
		if ok, _, _ := conn.Exists(p); !ok {
			_, _ = conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll))
		}
	}
	if !l.getLock(c.keyPath(key), key) {
		return nil, errors.New("seed: getLock returned false")
	}
	return l.close, nil
}

// getLock is ZookeeperLock.getLock(key), with "/" + key passed in as base.
func (l *seedLock) getLock(base, key string) bool {
	err := func() error {
		// Stat stat = zk.exists("/" + key, false); if null, create it (persistent).
		ok, _, err := l.zk.Exists(base)
		if err != nil {
			return err
		}
		if !ok {
			if _, err := l.zk.Create(base, []byte(key), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
				return err
			}
		}
		// zkNode = zk.create("/" + key + "/" + key + "_", ..., EPHEMERAL_SEQUENTIAL)
		node, err := l.zk.Create(base+"/"+key+"_", []byte(key), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err == nil && l.f.dropCreateReply {
			node, err = "", zk.ErrConnectionClosed // the reply never arrived
		}
		if err != nil {
			return err
		}
		l.zkNode = node
		// List, sort, and take the first.
		children, _, err := l.zk.Children(base)
		if err != nil {
			return err
		}
		slices.Sort(children)
		first := children[0]
		if strings.HasSuffix(l.zkNode, first) {
			return nil
		}
		// Watch the node before ours: zk.exists(path, true).
		last := first
		for _, n := range children {
			if strings.HasSuffix(l.zkNode, n) {
				if _, _, _, err := l.zk.ExistsW(base + "/" + last); err != nil {
					return err
				}
				break
			}
			last = n
		}
		if l.f.afterWatch != nil {
			l.f.afterWatch(l.zk)
		}
		// synchronized (this) { wait(); }
		l.mu.Lock()
		l.cond.Wait()
		l.mu.Unlock()
		return nil
	}()
	if err != nil {
		// catch (Exception e) { e.printStackTrace(); }
	}
	return true // in every case
}

// process is the Watcher: on NodeDeleted, notify().
func (l *seedLock) process(ev zk.Event) {
	if ev.Type == zk.EventNodeDeleted {
		l.mu.Lock()
		l.cond.Signal()
		l.mu.Unlock()
	}
}

// close is ZookeeperLock.close(): zk.delete(zkNode, -1); zk.close(). A
// delete that throws (zkNode is null) skips the close.
func (l *seedLock) close() error {
	if err := l.zk.Delete(l.zkNode, -1); err != nil {
		return err
	}
	l.zk.Close()
	return nil
}

// --- the scenarios -------------------------------------------------------

// seedBound is how long a scenario waits for something the seed never does.
// dlock does it at once, driven by events; only a failing recipe waits this
// long.
const seedBound = 3 * time.Second

type lockResult struct {
	release func() error
	err     error
}

func lockAsync(ctx context.Context, c lockClient, key string, f faults) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		rel, err := c.lock(ctx, key, f)
		ch <- lockResult{rel, err}
	}()
	return ch
}

func within(ch <-chan lockResult, d time.Duration) (lockResult, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r, true
	case <-t.C:
		return lockResult{}, false
	}
}

var seedScenarios = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, srv *testserver.ZooKeeper, r recipe) error
}{
	{"lostCreateReply_orphanBlocksKey", func(t *testing.T, ctx context.Context, srv *testserver.ZooKeeper, r recipe) error {
		root := testRoot(t)
		a, b := r.newClient(t, ctx, srv, root), r.newClient(t, ctx, srv, root)
		res, ok := within(lockAsync(ctx, a, "order", faults{dropCreateReply: true}), seedBound)
		if !ok {
			return errors.New("a's lock call hung after a lost create reply")
		}
		var relErr error
		if res.err == nil {
			relErr = res.release()
		}
		// Whatever a's call did, nothing of it may block b.
		res, ok = within(lockAsync(ctx, b, "order", faults{}), seedBound)
		if !ok {
			return fmt.Errorf("b is blocked by the node of a's lost create (a's release: %v)", relErr)
		}
		if relErr != nil {
			return fmt.Errorf("a's release: %w", relErr)
		}
		if res.err != nil {
			return res.err
		}
		return res.release()
	}},
	{"releaseBetweenWatchAndWait_waiterHangs", func(t *testing.T, ctx context.Context, srv *testserver.ZooKeeper, r recipe) error {
		root := testRoot(t)
		holder, waiter := r.newClient(t, ctx, srv, root), r.newClient(t, ctx, srv, root)
		release, err := holder.lock(ctx, "order", faults{})
		if err != nil {
			return err
		}
		released := make(chan error, 1)
		// The holder releases right after the waiter set its watch, and
		// the notification reaches the waiter before it starts waiting
		// (a round trip on its session guarantees that).
		res, ok := within(lockAsync(ctx, waiter, "order", faults{afterWatch: func(conn *zk.Conn) {
			err := release()
			_, _ = conn.Sync("/")
			released <- err
		}}), seedBound)
		select {
		case err := <-released:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return errors.New("the waiter never watched its predecessor")
		}
		if !ok {
			return errors.New("the waiter missed the release and waits forever")
		}
		if res.err != nil {
			return res.err
		}
		return res.release()
	}},
	{"sessionPerLockCall", func(t *testing.T, ctx context.Context, srv *testserver.ZooKeeper, r recipe) error {
		root := testRoot(t)
		c := r.newClient(t, ctx, srv, root)
		admin := dialZK(t, ctx, srv.Addr(), connOpts{})
		sessions := map[int64]bool{}
		for _, key := range []string{"a", "b", "c"} {
			release, err := c.lock(ctx, key, faults{})
			if err != nil {
				return err
			}
			defer release()
			for _, n := range children(t, admin, c.keyPath(key)) {
				_, stat, err := admin.Get(c.keyPath(key) + "/" + n)
				if err != nil {
					return err
				}
				sessions[stat.EphemeralOwner] = true
			}
		}
		if len(sessions) != 1 {
			return fmt.Errorf("three locks of one client used %d sessions", len(sessions))
		}
		return nil
	}},
	{"errorSwallowed_lockClaimed", func(t *testing.T, ctx context.Context, srv *testserver.ZooKeeper, r recipe) error {
		// The root belongs to somebody else: everybody may read, nobody
		// else may create. Every lock call must fail.
		root := testRoot(t)
		admin := dialZK(t, ctx, srv.Addr(), connOpts{})
		if _, err := admin.Create("/test", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		acl := append(zk.DigestACL(zk.PermAll, "owner", "pw"), zk.WorldACL(zk.PermRead)...)
		if _, err := admin.Create(root, nil, 0, acl); err != nil {
			return err
		}
		c := r.newClient(t, ctx, srv, root)
		release, err := c.lock(ctx, "order", faults{})
		if err == nil {
			_ = release()
			return errors.New("lock reported success without permission to create a node")
		}
		return nil
	}},
}

// TestSeedFlaws runs each scenario against dlock (must pass) and against the
// seed's recipe (must fail).
func TestSeedFlaws(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	for _, sc := range seedScenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, r := range []recipe{{"dlock", newDlockClient}, {"seed", newSeedClient}} {
				t.Run(r.name, func(t *testing.T) {
					ctx := testCtx(t)
					err := sc.run(t, ctx, srv, r)
					switch {
					case r.name == "dlock" && err != nil:
						t.Fatalf("dlock: %v", err)
					case r.name == "seed" && err == nil:
						t.Fatal("the seed's recipe passed: the scenario does not catch its flaw")
					case r.name == "seed":
						t.Logf("seed fails as expected: %v", err)
					}
				})
			}
		})
	}
}
