package faultinject_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// The detection of a standalone ZooKeeper (zkdlock.Detect, the default)
// against real servers of every kind: it must never take an ensemble's
// member for a standalone server, however the Client was made and whatever
// member it talks to, and must notice when the standalone server it found
// turns into an ensemble's follower under its session.

// configNode is where ZooKeeper keeps an ensemble's membership; zkdlock's
// standalone check reads it.
const configNode = "/zookeeper/config"

// proofConn wraps a zk.Conn for zkdlock.New and records the requests by
// which a Client proves that the server that expires its session heard from
// it: syncs, and standalone checks with how much they read. It tells, on
// began, when either begins: a renewal starts with one of them, so when
// the next begins, the renewal before is done and the lease's deadline
// reflects it. Once gated, each one waits, after telling, until the test
// lets it go on (next), so that the test reads the deadline before the
// renewal that request begins can change it.
type proofConn struct {
	zkdlock.Conn
	began chan proofReq
	gated atomic.Bool
	gate  chan struct{}
	stop  chan struct{} // closed by ungate: nothing waits any more
	once  sync.Once

	mu     sync.Mutex
	syncs  []time.Time // send times; guarded by mu
	checks []proofReq  // guarded by mu
}

// proofReq is a sync or a check as it began (n: its index among its kind).
type proofReq struct {
	sync bool
	n    int
	sent time.Time
	read int // a check's answer: bytes read, -1 for an error, -2 until answered
}

func newProofConn(t *testing.T, c zkdlock.Conn) *proofConn {
	pc := &proofConn{Conn: c, began: make(chan proofReq, 64), gate: make(chan struct{}), stop: make(chan struct{})}
	t.Cleanup(pc.ungate)
	return pc
}

// ungate lets every request go on without waiting, for good: call it
// before releasing the lease and closing the Client.
func (c *proofConn) ungate() { c.once.Do(func() { close(c.stop) }) }

func (c *proofConn) tell(r proofReq) {
	if !c.gated.Load() {
		select {
		case c.began <- r:
		default:
		}
		return
	}
	select {
	case c.began <- r:
	case <-c.stop:
		return
	}
	select {
	case <-c.gate:
	case <-c.stop:
	}
}

// next waits for the next sync or check to begin, once gated: the request
// waits until next is called again (or the test ends).
func (c *proofConn) next(t *testing.T, ctx context.Context, l *dlock.Lease, what string) proofReq {
	t.Helper()
	if c.gated.Swap(true) {
		select {
		case c.gate <- struct{}{}: // let the one before go on
		case <-ctx.Done():
			t.Fatalf("%s (watchdog)", what)
		}
	} else {
		for len(c.began) > 0 {
			<-c.began // before the gate: done already
		}
	}
	select {
	case r := <-c.began:
		return r
	case <-l.Done():
		t.Fatalf("lease lost: %v", l.Err())
	case <-ctx.Done():
		t.Fatalf("%s (watchdog)", what)
	}
	panic("unreachable")
}

func (c *proofConn) Sync(path string) (string, error) {
	c.mu.Lock()
	r := proofReq{sync: true, n: len(c.syncs), sent: time.Now()}
	c.syncs = append(c.syncs, r.sent)
	c.mu.Unlock()
	c.tell(r)
	return c.Conn.Sync(path)
}

func (c *proofConn) Get(path string) ([]byte, *zk.Stat, error) {
	if path != configNode {
		return c.Conn.Get(path)
	}
	c.mu.Lock()
	r := proofReq{n: len(c.checks), sent: time.Now(), read: -2}
	c.checks = append(c.checks, r)
	c.mu.Unlock()
	c.tell(r)
	data, st, err := c.Conn.Get(path)
	c.mu.Lock()
	c.checks[r.n].read = len(data)
	if err != nil {
		c.checks[r.n].read = -1
	}
	c.mu.Unlock()
	return data, st, err
}

// firstMembers returns the first check that read something (the members of
// an ensemble), or nil.
func (c *proofConn) firstMembers() *proofReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.checks {
		if r.read > 0 {
			return &r
		}
	}
	return nil
}

func (c *proofConn) counts() (syncs, checks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.syncs), len(c.checks)
}

func (c *proofConn) sync(i int) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.syncs[i]
}

func (c *proofConn) check(i int) proofReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checks[i]
}

// ensembleLag is zkdlock's bound, without a tick time, on how late the
// leader hears of a follower's clients: 9/32 of the session timeout.
func ensembleLag(ttl time.Duration) time.Duration { return 9 * ttl / 32 }

// safeTTL is a lease's validity less the engine's margins.
func safeTTL(ttl time.Duration) time.Duration { return ttl - ttl/100 - 2*time.Millisecond }

// TestZKDetect_ensemble: on a 3-node ensemble, detection says "ensemble" on
// a follower and on the leader alike. A Client made with New reads
// /zookeeper/config once (at New) and then keeps to the ensemble rule: its
// renewals sync, and after each its lease counts from what the previous
// one proved (the deadline after renewal n is at most renewal n's sync +
// session timeout − margins − the lag), never from the renewal itself. A
// Client made with Open (through a proxy that shows its requests) reads the
// node once and renews with syncs. A Client that took a member for a
// standalone server would renew with the check instead of the sync, and
// count each lease from its last renewal: the test would fail.
func TestZKDetect_ensemble(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	e := startZKEnsemble(t, 3)
	lead := e.leader()
	if lead < 0 {
		t.Fatal("no leader")
	}
	follower := (lead + 1) % 3
	for _, s := range []struct {
		name string
		i    int
	}{{"zk-follower", follower}, {"zk-leader", lead}} {
		t.Run(s.name, func(t *testing.T) {
			if m := e.mode(s.i); !strings.HasPrefix(s.name, "zk-"+m) {
				t.Fatalf("server %d is %q now", s.i+1, m)
			}
			t.Run("New", func(t *testing.T) { detectEnsembleNew(t, e.clients[s.i], ttl) })
			t.Run("Open", func(t *testing.T) { detectEnsembleOpen(t, e.clients[s.i], ttl) })
		})
	}
}

func detectEnsembleNew(t *testing.T, addr string, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := newProofConn(t, dialZK(t, []string{addr}, ttl))
	c, err := zkdlock.New(ctx, conn, &zkdlock.Options{Root: "/fi-detect-new", SessionTimeout: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, checks := conn.counts(); checks != 1 {
		t.Fatalf("New read %s %d times, want once", configNode, checks)
	}
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	defer conn.ungate()
	grantSyncs, _ := conn.counts()
	if grantSyncs == 0 {
		t.Fatal("the first grant of a Client made with New sent no sync: it took the member for a standalone server")
	}
	safe, lag := safeTTL(ttl), ensembleLag(ttl)
	for renewals := 0; renewals < 3; {
		r := conn.next(t, ctx, l, "no renewal")
		if !r.sync {
			t.Fatalf("a renewal read %s: the Client still checks on an ensemble", configNode)
		}
		if r.n <= grantSyncs {
			continue // the first renewal: nothing done yet
		}
		renewals++
		prev := conn.sync(r.n - 1) // the renewal just done (or tried)
		if d := l.Deadline(); d.After(prev.Add(safe - lag)) {
			t.Fatalf("after the renewal whose sync was sent at %v the deadline is %v after it, want at most %v: counted from the renewal itself, as on a standalone server?",
				prev.Format("15:04:05.000"), d.Sub(prev), safe-lag)
		}
	}
	if _, checks := conn.counts(); checks != 1 {
		t.Errorf("%s read %d times in all, want once (at New)", configNode, checks)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
}

func detectEnsembleOpen(t *testing.T, addr string, ttl time.Duration) {
	syncs, checks := openAndRenew(t, addr, ttl, 3)
	if checks != 1 {
		t.Errorf("the Client read %s %d times, want once (at Open)", configNode, checks)
	}
	if syncs < 3 {
		t.Errorf("%d syncs on a lock node in three renewals, want one each: the Client renews as on a standalone server", syncs)
	}
}

// TestZKDetect_openStandalone: the control, a Client made with Open on a
// standalone server (testserver.SharedZooKeeper): it reads
// /zookeeper/config at Open and in each renewal, and never syncs.
func TestZKDetect_openStandalone(t *testing.T) {
	t.Run("zk", func(t *testing.T) {
		srv := testserver.SharedZooKeeper(t)
		syncs, checks := openAndRenew(t, srv.Addr(), 3*time.Second, 3)
		if syncs != 0 {
			t.Errorf("%d syncs on a lock node, want none on a standalone server", syncs)
		}
		if checks < 4 {
			t.Errorf("%s read %d times, want at Open and in each of three renewals", configNode, checks)
		}
	})
}

// openAndRenew opens a Client on addr through a ZooKeeper proxy, takes a
// key, lets renewals go by (each begins with its proof: a sync on the lock
// node, or a read of /zookeeper/config after Open's), and counts the syncs
// on lock nodes and the reads of /zookeeper/config that the Client sent
// meanwhile.
func openAndRenew(t *testing.T, addr string, ttl time.Duration, renewals int) (syncs, checks int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := faultproxy.New(addr, &faultproxy.Options{Protocol: faultproxy.ZooKeeper, Clock: faultinject.Mono})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	obs := p.Observe(func(f *faultproxy.Frame) bool {
		return f.Up && (f.Op == faultproxy.ZKOpSync || f.Op == faultproxy.ZKOpGetData && f.Path == configNode)
	})
	defer obs.Stop()
	c, err := dlock.Open(ctx, fmt.Sprintf("zk://%s/fi-detect-open?session_timeout=%v&connect_timeout=30s", p.Addr(), ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	for done := 0; done < renewals; {
		select {
		case f := <-obs.C:
			switch {
			case f.Op == faultproxy.ZKOpSync && strings.Contains(f.Path, "/lock-"):
				syncs++
				done++
			case f.Op == faultproxy.ZKOpGetData:
				checks++
				if checks > 1 {
					done++ // Open's is the first
				}
			}
		case <-l.Done():
			t.Fatalf("lease lost: %v", l.Err())
		case <-ctx.Done():
			t.Fatalf("%d renewals seen, want %d (watchdog)", done, renewals)
		}
	}
	if n := obs.Missed(); n > 0 {
		t.Fatalf("the observer missed %d frames", n)
	}
	return syncs, checks
}

// TestZKDetect_standaloneTurnedFollower: a Client made with New finds a
// standalone server and holds a lease; the server is then restarted as a
// follower of a 3-node ensemble made from copies of its data (the usual way
// to grow a standalone server into an ensemble), on the same address. The
// Client's session survives: it reconnects, with the same session, to a
// follower, and New cannot see reconnects. Its next renewal's check must
// read the membership and put the Client on the ensemble rule: that
// renewal syncs, and the lease counts from what was proved before it (at
// most the check's send time + session timeout − margins − the lag), not
// from the renewal itself. A Client that decided once, at New, that its
// server is standalone would count from the renewal itself: the test fails
// then (checked by making the check take any answer for an empty one).
func TestZKDetect_standaloneTurnedFollower(t *testing.T) {
	t.Parallel()
	testserver.SkipIfShort(t)
	// Long enough for the lease and the session to outlive the conversion
	// (three JVMs and an election) on a loaded machine.
	const ttl = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newZKDirs(t, 3)
	e.configure(0, nil)
	e.start(0)
	if err := e.awaitQuorum(1, 90*time.Second); err != nil {
		t.Fatalf("standalone zookeeper: %v", err)
	}
	if m := e.mode(0); m != "standalone" {
		t.Fatalf("server 1 is %q, want standalone", m)
	}
	conn := newProofConn(t, dialZK(t, []string{e.clients[0]}, ttl))
	sid := conn.SessionID()
	c, err := zkdlock.New(ctx, conn, &zkdlock.Options{Root: "/fi-detect", SessionTimeout: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	if syncs, checks := conn.counts(); syncs != 0 || checks != 1 || conn.check(0).read != 0 {
		t.Fatalf("on the standalone server: %d syncs, %d checks (first read %d bytes), want none, one, 0", syncs, checks, conn.check(0).read)
	}

	// The conversion: stop the standalone server, give its data to all
	// three members, start the ensemble. Servers 2 and 3 elect a leader
	// first, so that server 1 joins as a follower.
	e.kill(0)
	for i := 1; i < 3; i++ {
		e.configure(i, e.quorum)
		if out, err := exec.Command("cp", "-r", filepath.Join(e.dirs[0], "data", "version-2"), filepath.Join(e.dirs[i], "data")).CombinedOutput(); err != nil {
			t.Fatalf("copy the data: %v: %s", err, out)
		}
		e.start(i)
	}
	e.waitQuorum(2)
	e.configure(0, e.quorum)
	e.start(0)
	e.waitQuorum(3)
	if m := e.mode(0); m != "follower" {
		t.Fatalf("server 1 is %q, want follower", m)
	}

	// Wait for the first check that reads the membership (the first
	// renewal on the follower), and for the renewal it began to be done:
	// the next proof request begins, other than the sync that this
	// renewal sends after its check on an ensemble.
	safe, lag := safeTTL(ttl), ensembleLag(ttl)
	defer conn.ungate()
	var members *proofReq
	synced := false
	for done := false; !done; {
		r := conn.next(t, ctx, l, "no renewal after the conversion")
		if members == nil {
			if members = conn.firstMembers(); members == nil {
				continue
			}
		}
		switch {
		case !r.sent.After(members.sent):
		case r.sync && !synced:
			synced = true
		default:
			done = true
		}
	}
	t.Logf("session 0x%x on server 1 (%s); first check on it read %d bytes, sent %v after New's; the renewal synced: %v; deadline %v after that check",
		conn.SessionID(), e.mode(0), members.read, members.sent.Sub(conn.check(0).sent).Round(time.Millisecond), synced, l.Deadline().Sub(members.sent).Round(time.Millisecond))
	if got := conn.SessionID(); got != sid {
		t.Fatalf("session 0x%x, then 0x%x: the conversion ended the session, and the test shows nothing", sid, got)
	}
	if !synced {
		t.Fatalf("the renewal after the conversion read %d bytes of %s and sent no sync: the Client took the follower for a standalone server", members.read, configNode)
	}
	if d := l.Deadline(); d.After(members.sent.Add(safe - lag)) {
		t.Fatalf("after the renewal that read the membership (sent at %v) the deadline is %v after it, want at most %v: counted from the renewal itself, as on a standalone server",
			members.sent.Format("15:04:05.000"), d.Sub(members.sent), safe-lag)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
}

// zkDirs is a zkEnsemble whose configurations the test writes server by
// server, so that a server can run standalone first and join an ensemble
// later on the same data directory and client port.
type zkDirs struct {
	*zkEnsemble
	quorum []string // the server.N lines of the ensemble
}

func newZKDirs(t *testing.T, n int) *zkDirs {
	t.Helper()
	testserver.SkipIfShort(t)
	e := &zkDirs{zkEnsemble: newZKEnsemble(t)}
	for i := range n {
		e.dirs = append(e.dirs, t.TempDir())
		e.clients = append(e.clients, testserver.Addr(testserver.FreePort(t)))
		e.quorum = append(e.quorum, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, testserver.FreePort(t), testserver.FreePort(t)))
		e.procs = append(e.procs, nil)
	}
	return e
}

// configure writes server i's configuration: standalone without servers,
// a member of the ensemble of servers otherwise.
func (e *zkDirs) configure(i int, servers []string) {
	_, port, _ := strings.Cut(e.clients[i], ":")
	cfg := strings.Join(append([]string{
		"tickTime=100", "initLimit=20", "syncLimit=10",
		"dataDir=" + filepath.Join(e.dirs[i], "data"),
		"clientPort=" + port, "clientPortAddress=127.0.0.1",
		"admin.enableServer=false", "4lw.commands.whitelist=*",
		"maxSessionTimeout=60000", "maxClientCnxns=0",
	}, servers...), "\n") + "\n"
	if err := os.MkdirAll(filepath.Join(e.dirs[i], "data"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dirs[i], "data", "myid"), []byte(fmt.Sprint(i+1)), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dirs[i], "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
}
