package faultinject_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
)

// rig is one backend under test: its servers, an admin connection for
// inspection and fault injection, the fenced resources, and the recipe the
// holders run ("dlock", or "naive" for the negative controls).
type rig struct {
	t      *testing.T
	kind   string // redis, zk, etcd
	recipe string // dlock, naive
	ttl    time.Duration
	addrs  []string
	proto  faultproxy.Protocol

	redis *testserver.Redis
	zk    *testserver.ZooKeeper
	etcd  *etcdCluster
	ens   *zkEnsemble // a ZooKeeper of the test's own
	rdb   *redis.Client
	zkc   *zk.Conn

	res     *faultinject.ResourceServer
	targets []string // resources the holders' loops write to
	master  string   // Sentinel master name

	mu   sync.Mutex
	keys int
	n    int // resources made
}

// Redis holders wait in line with a short waiter timeout, so that a ghost
// waiter (negative control of scenario 6) costs little time.
const redisWaiterTimeout = time.Second

func newRig(t *testing.T, kind, recipe string, ttl time.Duration) *rig {
	t.Helper()
	r := &rig{t: t, kind: kind, recipe: recipe, ttl: ttl}
	logf, err := os.Create(filepath.Join(t.TempDir(), "resource.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logf.Close() })
	r.res, err = faultinject.NewResourceServer(logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.res.Close)
	return r
}

// newRedisRig starts a redis-server for t; extra are its arguments
// (persistence, say).
func newRedisRig(t *testing.T, recipe string, ttl time.Duration, extra ...string) *rig {
	t.Helper()
	r := newRig(t, "redis", recipe, ttl)
	r.redis = testserver.StartRedis(t, extra...)
	r.addrs = []string{r.redis.Addr()}
	r.proto = faultproxy.RESP
	r.rdb = redis.NewClient(&redis.Options{Addr: r.redis.Addr()})
	t.Cleanup(func() { _ = r.rdb.Close() })
	return r
}

// newZKRig uses the test binary's shared ZooKeeper server.
func newZKRig(t *testing.T, recipe string, ttl time.Duration) *rig {
	t.Helper()
	r := newRig(t, "zk", recipe, ttl)
	r.zk = testserver.SharedZooKeeper(t)
	r.addrs = []string{r.zk.Addr()}
	r.proto = faultproxy.ZooKeeper
	r.zkc = dialZK(t, r.addrs, 10*time.Second)
	return r
}

func dialZK(t *testing.T, addrs []string, timeout time.Duration) *zk.Conn {
	t.Helper()
	conn, ev, err := zk.Connect(addrs, timeout, zk.WithLogInfo(false), zk.WithLogger(nopZKLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == zk.StateHasSession {
				go func() {
					for range ev {
					}
				}()
				return conn
			}
		case <-deadline:
			t.Fatalf("zookeeper %v: no session after 60s", addrs)
		}
	}
}

type nopZKLogger struct{}

func (nopZKLogger) Printf(string, ...any) {}

// key returns a fresh key.
func (r *rig) key(scenario string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys++
	return fmt.Sprintf("fi-%s-%s-%d-%d", scenario, r.recipe, time.Now().UnixNano()%1e6, r.keys)
}

// resources adds a checked and an unchecked resource, fresh, and returns
// their names.
func (r *rig) resources() (checked, unchecked *faultinject.Resource) {
	r.mu.Lock()
	r.n++
	n := r.n
	r.mu.Unlock()
	checked = &faultinject.Resource{Name: fmt.Sprintf("checked-%d", n), Checked: true}
	unchecked = &faultinject.Resource{Name: fmt.Sprintf("unchecked-%d", n)}
	r.res.Add(checked)
	r.res.Add(unchecked)
	return checked, unchecked
}

// proxy starts a proxy in front of the first server.
func (r *rig) proxy() *faultproxy.Proxy {
	return r.proxyTo(r.addrs[0])
}

func (r *rig) proxyTo(addr string) *faultproxy.Proxy {
	p := faultproxy.Start(r.t, addr, &faultproxy.Options{Protocol: r.proto, Clock: faultinject.Mono})
	return p
}

// holder starts a holder process connected through the proxies (or
// directly when there are none). weak selects the dlock_weak build.
func (r *rig) holder(name string, weak bool, via ...*faultproxy.Proxy) *proc {
	r.t.Helper()
	return r.holderTTL(name, weak, r.ttl, via...)
}

// holderTTL starts a holder whose leases last ttl rather than the rig's.
func (r *rig) holderTTL(name string, weak bool, ttl time.Duration, via ...*faultproxy.Proxy) *proc {
	r.t.Helper()
	addrs := r.addrs
	if len(via) > 0 {
		addrs = nil
		for _, p := range via {
			addrs = append(addrs, p.Addr())
		}
	}
	backend := r.kind
	if r.recipe == "naive" {
		backend = "naive-" + r.kind
	}
	return startHolder(r.t, faultinject.HolderConfig{
		Name: name, Backend: backend, Addrs: addrs, TTL: ttl, Master: r.master,
		WaiterTimeout: redisWaiterTimeout, Resource: r.res.Addr(), Targets: r.targets,
	}, weak)
}

// Request predicates, by backend and recipe.
func (r *rig) isAcquire(f *faultproxy.Frame) bool {
	switch {
	case r.kind == "redis" && r.recipe == "dlock":
		return isScript(f, 5, 7)
	case r.kind == "redis":
		return f.Command() == "SET"
	case r.kind == "zk" && r.recipe == "dlock":
		// A create of a lock node, alone or in a multi.
		op := f.ZKFirstOp()
		return (op == faultproxy.ZKOpCreate || op == faultproxy.ZKOpCreate2) && strings.Contains(string(f.Data), "/lock-")
	case r.kind == "zk":
		return f.Op == faultproxy.ZKOpCreate && strings.HasSuffix(f.Path, "/lock")
	}
	return false
}

func (r *rig) isRelease(f *faultproxy.Frame) bool {
	switch {
	case r.kind == "redis" && r.recipe == "dlock":
		return isScript(f, 6, 2)
	case r.kind == "redis":
		return f.Command() == "DEL"
	case r.kind == "zk" && r.recipe == "dlock":
		// A release is a multi: setData on the lock node, then its delete
		// (the mark that lets the next waiter skip a listing; see
		// zkdlock/release.go), or a plain delete (a lock granted with
		// nobody behind it, or without write permission), or a multi
		// that deletes the lock node and the key node (granted alone).
		op := f.ZKFirstOp()
		return (op == faultproxy.ZKOpDelete || op == faultproxy.ZKOpSetData) && strings.Contains(string(f.Data), "/lock-")
	case r.kind == "zk":
		return f.Op == faultproxy.ZKOpDelete && strings.HasSuffix(f.Path, "/lock")
	}
	return false
}

// isKeyNodeDelete matches zkdlock's release of a lock granted alone: a
// multi that deletes the lock node, then the key node (one path with
// "/lock-", where the release's setData and delete have two).
func isKeyNodeDelete(f *faultproxy.Frame) bool {
	return f.Op == faultproxy.ZKOpMulti && f.ZKFirstOp() == faultproxy.ZKOpDelete && bytes.Count(f.Data, []byte("/lock-")) == 1
}

func (r *rig) isRenew(f *faultproxy.Frame) bool {
	switch {
	case r.kind == "redis" && r.recipe == "dlock":
		return isScript(f, 1, 2)
	case r.kind == "redis":
		return f.Command() == "PEXPIRE"
	}
	return false
}

// isScript matches a redisdlock script call with that many keys and
// arguments: EVALSHA sha numkeys keys... args..., with 5 keys and 7
// arguments (acquire), 6 keys and 2 (release), or 1 key and 2 (renew).
func isScript(f *faultproxy.Frame, keys, args int) bool {
	c := f.Command()
	return (c == "EVALSHA" || c == "EVAL") && len(f.Args) == 3+keys+args && f.Args[2] == strconv.Itoa(keys)
}

func isPing(f *faultproxy.Frame) bool { return f.Up && f.Op == faultproxy.ZKOpPing }

// redisKeys are the Redis keys of a dlock or naive lock.
func (r *rig) redisKeys(key string) []string {
	if r.recipe == "naive" {
		k := faultinject.NaiveRedisPrefix + key
		return []string{k}
	}
	base := "dlock:{" + key + "}"
	return []string{base, base + ":q", base + ":w"}
}

// leftovers lists what the server still stores for key: Redis keys, or
// ZooKeeper lock nodes.
func (r *rig) leftovers(key string) []string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var left []string
	switch r.kind {
	case "redis":
		for _, k := range r.redisKeys(key) {
			n, err := r.rdb.Exists(ctx, k).Result()
			if err != nil {
				r.t.Fatalf("leftovers: %v", err)
			}
			if n > 0 {
				left = append(left, k)
			}
		}
	case "zk":
		parent := zkdlock.DefaultRoot + "/" + key
		if r.recipe == "naive" {
			parent = faultinject.NaiveZKRoot + "/" + key
		}
		names, _, err := r.zkc.Children(parent)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			r.t.Fatalf("leftovers: %v", err)
		}
		for _, n := range names {
			left = append(left, parent+"/"+n)
		}
	default:
		return r.otherLeftovers(key)
	}
	return left
}

// queued returns how many entries (holder and waiters) the server has in
// key's queue.
func (r *rig) queued(key string) int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case r.kind == "redis" && r.recipe == "dlock":
		base := "dlock:{" + key + "}"
		n, err := r.rdb.LLen(ctx, base+":q").Result()
		if err != nil {
			r.t.Fatal(err)
		}
		held, err := r.rdb.Exists(ctx, base).Result()
		if err != nil {
			r.t.Fatal(err)
		}
		return int(n + held)
	case r.kind == "zk" || r.kind == "etcd":
		return len(r.leftovers(key))
	}
	return 0
}

// waitQueued waits until key's queue has at least n entries. It polls the
// server: there is no event to wait for in another process's queue.
func (r *rig) waitQueued(key string, n int) {
	r.t.Helper()
	if r.recipe == "naive" {
		return // no queue to look at
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.queued(key) < n {
		if time.Now().After(deadline) {
			r.t.Fatalf("key %s: fewer than %d entries in its queue after 20s", key, n)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state
	}
}

// awaitFired waits until an armed drop has happened.
func awaitFired(t *testing.T, d *faultproxy.Drop, timeout time.Duration, what string) faultproxy.DropEvent {
	t.Helper()
	select {
	case ev := <-d.Fired():
		return ev
	case <-time.After(timeout):
		t.Fatalf("the reply to %s was never dropped within %v: the request did not pass the proxy", what, timeout)
	}
	return faultproxy.DropEvent{}
}

// awaitAnswered reads frames from obs until at least one request matching
// isReq, read after the Mono time after, has been answered, and every such
// request seen so far has its answer. Requests and answers are matched by
// connection and index (RESP) or xid (ZooKeeper).
func awaitAnswered(t *testing.T, obs *faultproxy.Observer, proto faultproxy.Protocol, after int64, isReq func(*faultproxy.Frame) bool, timeout time.Duration) int {
	t.Helper()
	n, _ := awaitAnsweredOr(t, obs, proto, after, isReq, timeout, nil)
	return n
}

// awaitAnsweredOr is awaitAnswered that also returns, with stopped true,
// when stop closes first: a holder whose lease ended sends no more
// renewals to wait for.
func awaitAnsweredOr(t *testing.T, obs *faultproxy.Observer, proto faultproxy.Protocol, after int64, isReq func(*faultproxy.Frame) bool, timeout time.Duration, stop <-chan struct{}) (n int, stopped bool) {
	t.Helper()
	type id struct {
		conn uint64
		n    int64
	}
	key := func(f *faultproxy.Frame) id {
		if proto == faultproxy.ZooKeeper {
			return id{f.Conn, int64(f.XID)}
		}
		return id{f.Conn, int64(f.Index)}
	}
	pending := map[id]bool{}
	answered := 0
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for answered == 0 || len(pending) > 0 {
		select {
		case f := <-obs.C:
			switch {
			case f.Up && f.At > after && isReq(&f):
				if testing.Verbose() {
					t.Logf("retried request: conn %d #%d %s (%d args) %s", f.Conn, f.Index, f.Command(), len(f.Args), f.Path)
				}
				pending[key(&f)] = true
			case !f.Up && pending[key(&f)]:
				delete(pending, key(&f))
				if proto == faultproxy.RESP && strings.HasPrefix(string(f.Data), "-NOSCRIPT") {
					continue // not acted on: the client sends the script itself next
				}
				answered++
			}
		case <-stop:
			return answered, true
		case <-timer.C:
			t.Fatalf("retried requests: %d answered, %d unanswered after %v", answered, len(pending), timeout)
		}
	}
	return answered, false
}

// armed is a dropped-reply fault on one holder's path: in the proxy for
// Redis and ZooKeeper, in the holder's gRPC interceptor for etcd.
type armed struct {
	t    *testing.T
	r    *rig
	h    *proc
	p    *faultproxy.Proxy
	d    *faultproxy.Drop
	obs  *faultproxy.Observer
	pred func(*faultproxy.Frame) bool
	from int   // etcd: notices before arming
	at   int64 // Mono time of the drop
}

// arm drops the reply to h's next request of kind what (acquire, release or
// renew) on proxy p; with hold, h's retries wait until restore.
func (r *rig) arm(h *proc, p *faultproxy.Proxy, what string, hold bool) *armed {
	r.t.Helper()
	a := &armed{t: r.t, r: r, h: h, p: p}
	if r.kind == "etcd" {
		a.from = h.mark()
		// Every etcddlock operation that acquires or releases is a Txn;
		// the naive recipe releases with a DeleteRange.
		method := "/etcdserverpb.KV/Txn"
		if what == "release" && r.recipe == "naive" {
			method = "/etcdserverpb.KV/DeleteRange"
		}
		h.call(faultinject.Command{Op: "drop_reply", Method: method, HoldAfter: hold}, time.Minute)
		return a
	}
	switch what {
	case "acquire":
		a.pred = r.isAcquire
	case "release":
		a.pred = r.isRelease
		if hold && r.kind == "zk" && r.recipe == "dlock" {
			// A lone holder's release first tries the multi that deletes
			// the key node too, which the server refuses while a waiter
			// is queued: it releases nothing, and holding its retries
			// would keep the key from the waiter. The release is the
			// plain delete that follows (zkdlock's keynode_test.go drops
			// the multi's own reply).
			a.pred = func(f *faultproxy.Frame) bool { return r.isRelease(f) && !isKeyNodeDelete(f) }
		}
	case "renew":
		a.pred = r.isRenew
	}
	if hold {
		a.obs = p.Observe(func(f *faultproxy.Frame) bool { return !f.Up || a.pred(f) })
	}
	a.d = p.DropReply(a.pred, hold)
	return a
}

// fired waits until the reply has been dropped.
func (a *armed) fired(timeout time.Duration, what string) {
	a.t.Helper()
	if a.r.kind == "etcd" {
		ev, _, ok := a.h.notice(a.from, timeout, what, func(e faultinject.Event) bool { return e.Ev == "dropped" })
		if !ok {
			a.t.Fatalf("the reply to %s was never dropped within %v", what, timeout)
		}
		a.at = ev.At
		return
	}
	a.at = awaitFired(a.t, a.d, timeout, what).Request.At
}

// restore lets the held retries go.
func (a *armed) restore() {
	a.t.Helper()
	if a.r.kind == "etcd" {
		a.h.call(faultinject.Command{Op: "restore"}, time.Minute)
		return
	}
	a.p.Restore()
}

// answered waits until the held retries have been answered and returns how
// many were.
func (a *armed) answered(timeout time.Duration) int {
	a.t.Helper()
	if a.r.kind == "etcd" {
		if _, _, ok := a.h.notice(a.from, timeout, "retry", func(e faultinject.Event) bool { return e.Ev == "answered" }); !ok {
			a.h.mu.Lock()
			defer a.h.mu.Unlock()
			a.t.Fatalf("no held retry was answered within %v; notices: %+v", timeout, a.h.notices[a.from:])
		}
		return 1
	}
	defer a.obs.Stop()
	return awaitAnswered(a.t, a.obs, a.r.proto, a.at, a.pred, timeout)
}
