package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"path"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ---- floors: the least time each server allows, measured beside the libraries ----
//
// A floor bounds a figure only if it is measured the same way and under the
// same conditions: the uncontended cycle's floor is a cycle of the fewest
// requests a lock needs, sent raw through the same client library and timed
// by runUncontended in the same round, beside the libraries; the hand-off's
// floor is one notification (the write that frees the lock, to another
// client's goroutine receiving the server's notice of it), timed in each
// round of the contended section for as long as a contended run's window.

// floorResult is one round's measurement of a floor on one backend.
type floorResult struct {
	Backend string
	Op      string // the raw requests, as the report names them
	Round   int
	N       int
	P50     time.Duration
	P99     time.Duration
	// RequestsPerCycle is what the server counted per cycle (cycle floors
	// only): it checks that the floor sends the requests it names.
	RequestsPerCycle float64
	Err              string
}

// cycleFloorOps names the raw requests of each backend's uncontended cycle
// floor: the fewest a lock that is safe to release needs.
var cycleFloorOps = map[string]string{
	"redis":     "SET NX PX + compare-and-delete script (EVALSHA), go-redis",
	"zookeeper": "create ephemeral sequential + getChildren + delete, go-zookeeper",
	"etcd":      "Txn put-if-absent (lease attached) + Delete, clientv3",
}

// runCycleFloor times the raw cycle of backend exactly as runUncontended
// times a library's: the same warm-up, samples and limit.
func runCycleFloor(s *servers, backend string, n int, limit time.Duration) floorResult {
	newRaw := map[string]func(context.Context, *env, string) (contender, error){
		"redis": newRawRedisCycle, "zookeeper": newRawZKCycle, "etcd": newRawEtcdCycle,
	}[backend]
	u := runUncontended(s, &library{Name: "floor (" + backend + ")", Backend: backend, newContender: newRaw}, n, limit)
	return floorResult{Backend: backend, Op: cycleFloorOps[backend], N: u.N, P50: u.P50, P99: u.P99, RequestsPerCycle: u.RequestsPerGrnt, Err: u.Err}
}

// errFloorHeld is a raw cycle finding its key taken: nothing else uses the
// floor's keys, so the measurement is void.
var errFloorHeld = errors.New("floor: key already held")

// rawRedisCycle takes the key with SET NX PX and releases it with the
// compare-and-delete script that a safe release needs (bsm/redislock's).
type rawRedisCycle struct {
	rdb        *redis.Client
	key, token string
}

var rawRedisRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

func newRawRedisCycle(_ context.Context, e *env, key string) (contender, error) {
	return &rawRedisCycle{rdb: newGoRedis(e), key: "bench-floor:" + key, token: "floor"}, nil
}

func (r *rawRedisCycle) Lock(ctx context.Context) error {
	ok, err := r.rdb.SetNX(ctx, r.key, r.token, 10*time.Second).Result()
	if err == nil && !ok {
		err = errFloorHeld
	}
	return err
}

func (r *rawRedisCycle) Unlock(ctx context.Context) error {
	n, err := rawRedisRelease.Run(ctx, r.rdb, []string{r.key}, r.token).Int()
	if err == nil && n != 1 {
		err = errors.New("floor: release found the key gone")
	}
	return err
}

func (r *rawRedisCycle) Close() { _ = r.rdb.Close() }

// rawZKCycle is the ZooKeeper lock recipe with nothing but its requests:
// create an ephemeral sequential node, list the children to see that it is
// the first, delete it.
type rawZKCycle struct {
	conn      *zk.Conn
	dir, node string
}

func newRawZKCycle(_ context.Context, e *env, key string) (contender, error) {
	conn, err := zkConnect(e, 10*time.Second)
	if err != nil {
		return nil, err
	}
	dir := "/bench-floor-" + key
	if _, err := conn.Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		conn.Close()
		return nil, err
	}
	return &rawZKCycle{conn: conn, dir: dir}, nil
}

func (r *rawZKCycle) Lock(context.Context) error {
	node, err := r.conn.Create(r.dir+"/n-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		return err
	}
	r.node = node
	children, _, err := r.conn.Children(r.dir)
	if err != nil {
		return err
	}
	if len(children) == 0 || slices.Min(children) != path.Base(node) {
		return errFloorHeld
	}
	return nil
}

func (r *rawZKCycle) Unlock(context.Context) error { return r.conn.Delete(r.node, -1) }

func (r *rawZKCycle) Close() { r.conn.Close() }

// rawEtcdCycle takes the key with one put-if-absent transaction, the key
// attached to a lease granted once (as a session's), and deletes it.
type rawEtcdCycle struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
	key   string
}

func newRawEtcdCycle(ctx context.Context, e *env, key string) (contender, error) {
	cli, err := etcdClient(e)
	if err != nil {
		return nil, err
	}
	// Long enough for a run without keep-alives, whose requests would
	// not be the cycle's.
	g, err := cli.Grant(ctx, 600)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return &rawEtcdCycle{cli: cli, lease: g.ID, key: "bench-floor/" + key}, nil
}

func (r *rawEtcdCycle) Lock(ctx context.Context) error {
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0)).
		Then(clientv3.OpPut(r.key, "", clientv3.WithLease(r.lease))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = errFloorHeld
	}
	return err
}

func (r *rawEtcdCycle) Unlock(ctx context.Context) error {
	_, err := r.cli.Delete(ctx, r.key)
	return err
}

func (r *rawEtcdCycle) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = r.cli.Revoke(ctx, r.lease)
	_ = r.cli.Close()
}

// ---- the notification floor ----

// notifier is one backend's least hand-off: arm prepares a sample (untimed:
// the key to free, the watch) and returns the channel on which the receipt
// time of its notice arrives; fire is the write that frees the key.
type notifier struct {
	op    string
	arm   func(ctx context.Context) (<-chan time.Time, error)
	fire  func(ctx context.Context) error
	close func()
}

// notifyOps names each backend's notification floor.
var notifyOps = map[string]string{
	"redis":     "script DEL + PUBLISH → subscriber on another connection (go-redis)",
	"zookeeper": "delete → watcher of another session (go-zookeeper)",
	"etcd":      "delete → watcher on another client (clientv3)",
}

// rawRedisHandoff frees the key and tells the next waiter in one request,
// as a FIFO hand-off on Redis must.
var rawRedisHandoff = redis.NewScript(`redis.call("del", KEYS[1]) return redis.call("publish", ARGV[1], ARGV[2])`)

// newNotifier opens the two clients of backend's notification floor: the
// releaser and the waiter.
func newNotifier(ctx context.Context, s *servers, backend string) (*notifier, error) {
	var closers []func()
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	nt := &notifier{op: notifyOps[backend], close: closeAll}
	fail := func(err error) (*notifier, error) { closeAll(); return nil, err }
	switch backend {
	case "redis":
		pub := redis.NewClient(&redis.Options{Addr: s.redis.addr})
		subc := redis.NewClient(&redis.Options{Addr: s.redis.addr})
		closers = append(closers, func() { _ = pub.Close() }, func() { _ = subc.Close() })
		sub := subc.Subscribe(ctx, "bench-floor")
		closers = append(closers, func() { _ = sub.Close() })
		if _, err := sub.Receive(ctx); err != nil {
			return fail(err)
		}
		msgs := sub.Channel()
		got := make(chan time.Time, 1)
		go func() {
			for range msgs {
				got <- time.Now()
			}
		}()
		nt.arm = func(ctx context.Context) (<-chan time.Time, error) {
			return got, pub.Set(ctx, "bench-floor", "x", 0).Err()
		}
		nt.fire = func(ctx context.Context) error {
			return rawRedisHandoff.Run(ctx, pub, []string{"bench-floor"}, "bench-floor", "x").Err()
		}
	case "zookeeper":
		a, err := zkConnect(s.env, 10*time.Second)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, a.Close)
		b, err := zkConnect(s.env, 10*time.Second)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, b.Close)
		if _, err := a.Create("/bench-floor", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fail(err)
		}
		nt.arm = func(context.Context) (<-chan time.Time, error) {
			if _, err := a.Create("/bench-floor/n", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
				return nil, err
			}
			_, _, ev, err := b.ExistsW("/bench-floor/n")
			if err != nil {
				return nil, err
			}
			fired := make(chan time.Time, 1)
			go func() { <-ev; fired <- time.Now() }()
			return fired, nil
		}
		nt.fire = func(context.Context) error { return a.Delete("/bench-floor/n", -1) }
	case "etcd":
		ca, err := etcdClient(s.env)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() { _ = ca.Close() })
		cb, err := etcdClient(s.env)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() { _ = cb.Close() })
		wctx, wcancel := context.WithCancel(context.Background())
		closers = append(closers, wcancel)
		// Deletes only: the put that arms a sample is not its notice.
		wch := cb.Watch(wctx, "bench-floor", clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		select {
		case resp, ok := <-wch:
			if !ok || !resp.Created {
				return fail(fmt.Errorf("etcd floor watch not created: %v", resp.Err()))
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		events := make(chan time.Time, 1)
		go func() {
			for resp := range wch {
				if len(resp.Events) > 0 {
					events <- time.Now()
				}
			}
		}()
		nt.arm = func(ctx context.Context) (<-chan time.Time, error) {
			_, err := ca.Put(ctx, "bench-floor", "x")
			return events, err
		}
		nt.fire = func(ctx context.Context) error { _, err := ca.Delete(ctx, "bench-floor"); return err }
	default:
		return nil, fmt.Errorf("unknown backend %q", backend)
	}
	return nt, nil
}

// measureNotify times notifications on nt from fire's start to the notice's
// receipt: first warm-up samples for warmN samples and at least warmFor,
// then up to n samples within window.
func measureNotify(ctx context.Context, backend string, nt *notifier, warmN int, warmFor time.Duration, n int, window time.Duration) rttResult {
	r := rttResult{Backend: backend, Op: nt.op}
	sample := func() (time.Duration, error) {
		fired, err := nt.arm(ctx)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := nt.fire(ctx); err != nil {
			return 0, err
		}
		select {
		case t1 := <-fired:
			return t1.Sub(t0), nil
		case <-time.After(5 * time.Second):
			return 0, errors.New("no notice within 5 s")
		}
	}
	warm := time.Now().Add(warmFor)
	for i := 0; i < warmN || time.Now().Before(warm); i++ {
		if _, err := sample(); err != nil {
			r.Err = err.Error()
			return r
		}
	}
	ds := make([]time.Duration, 0, min(n, 1<<16))
	end := time.Now().Add(window)
	for len(ds) < n && time.Now().Before(end) {
		d, err := sample()
		if err != nil {
			r.Err = err.Error()
			return r
		}
		ds = append(ds, d)
	}
	r.N, r.P50, r.P99 = len(ds), percentile(ds, 50), percentile(ds, 99)
	return r
}

// handoffFloorSamples bounds the samples of one hand-off floor measurement;
// the window ends it first.
const handoffFloorSamples = 100000

// runHandoffFloor measures backend's notification floor as the contended
// runs are measured: a warm-up, then for one window.
func runHandoffFloor(s *servers, backend string, warmup, window time.Duration) floorResult {
	ctx, cancel := context.WithTimeout(context.Background(), warmup+window+30*time.Second)
	defer cancel()
	f := floorResult{Backend: backend, Op: notifyOps[backend]}
	nt, err := newNotifier(ctx, s, backend)
	if err != nil {
		f.Err = err.Error()
		return f
	}
	defer nt.close()
	r := measureNotify(ctx, backend, nt, 0, warmup, handoffFloorSamples, window)
	f.N, f.P50, f.P99, f.Err = r.N, r.P50, r.P99, r.Err
	return f
}

// floorBefore runs floor for l's backend if l is the first library of that
// backend to run in this round (done records the backends measured), so
// that each floor is measured among its libraries' runs.
func floorBefore(l *library, done map[string]bool, floor func(backend string)) {
	if l.Missing != "" || done[l.Backend] {
		return
	}
	done[l.Backend] = true
	floor(l.Backend)
}

func logFloor(kind string, f floorResult) {
	log.Printf("%s floor %-9s n=%d p50 %v p99 %v req/cycle %.2f %s", kind, f.Backend, f.N, f.P50, f.P99, f.RequestsPerCycle, f.Err)
}
