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
// as a library's cycle is (cycler); the hand-off's floor is one notification
// (the write that frees the lock, to another client's goroutine receiving
// the server's notice of it), timed for as long as a contended run's
// window. Each is measured in every round in stretches, one just before each
// of its server's libraries, so that its samples (as many as a library's)
// meet the conditions of all of them, not of one moment.

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
	// StretchP50 is each stretch's p50, in the order of the libraries they
	// preceded: how much the conditions moved during the round.
	StretchP50 []time.Duration
	Err        string
}

// cycleFloorOps names the raw requests of each backend's uncontended cycle
// floor: the fewest a lock that is safe to release needs.
var cycleFloorOps = map[string]string{
	"redis":     "SET NX with expiry + compare-and-delete script (EVALSHA), go-redis",
	"zookeeper": "create ephemeral sequential + getChildren + delete, go-zookeeper",
	"etcd":      "Txn put-if-absent (lease attached) + Delete, clientv3",
}

// rawCycles are the raw cycles of the uncontended floor, as libraries.
var rawCycles = map[string]*library{
	"redis":     {Name: "raw cycle (redis)", Backend: "redis", newContender: newRawRedisCycle},
	"zookeeper": {Name: "raw cycle (zookeeper)", Backend: "zookeeper", newContender: newRawZKCycle},
	"etcd":      {Name: "raw cycle (etcd)", Backend: "etcd", newContender: newRawEtcdCycle},
}

// stretches divides one floor measurement of each backend among that
// backend's libraries of a round: the i-th of k stretches.
type stretches struct {
	libs map[string]int // libraries of each backend that run
	seen map[string]int // stretches begun
}

func newStretches(libs []*library) *stretches {
	st := &stretches{libs: map[string]int{}, seen: map[string]int{}}
	for _, l := range libs {
		if l.Missing == "" {
			st.libs[l.Backend]++
		}
	}
	return st
}

// next is the share of n (samples) and of d (time) of the next stretch
// before library l; ok is false for a library that does not run.
func (st *stretches) next(l *library, n int, d time.Duration) (first bool, share int, within time.Duration, ok bool) {
	k := st.libs[l.Backend]
	if l.Missing != "" || k == 0 {
		return false, 0, 0, false
	}
	i := st.seen[l.Backend]
	st.seen[l.Backend]++
	share = n / k
	if i < n%k {
		share++
	}
	return i == 0, share, d / time.Duration(k), true
}

// cycleFloors measures each backend's raw cycle in one round: n cycles and
// limit in all, as one library's uncontended run.
type cycleFloors struct {
	s          *servers
	n          int
	limit      time.Duration
	st         *stretches
	cyclers    map[string]*cycler
	stretchP50 map[string][]time.Duration // each stretch's p50
	backends   []string                   // in the order first measured
}

func newCycleFloors(s *servers, libs []*library, n int, limit time.Duration) *cycleFloors {
	return &cycleFloors{s: s, n: n, limit: limit, st: newStretches(libs), cyclers: map[string]*cycler{}, stretchP50: map[string][]time.Duration{}}
}

// before runs the stretch of l's backend's floor that precedes l's run.
func (f *cycleFloors) before(l *library) {
	first, n, within, ok := f.st.next(l, f.n, f.limit)
	if !ok {
		return
	}
	if first {
		life := time.Duration(f.st.libs[l.Backend]) * (f.limit + 30*time.Second)
		f.cyclers[l.Backend] = newCycler(f.s, rawCycles[l.Backend], f.n, life)
		f.backends = append(f.backends, l.Backend)
	}
	cy := f.cyclers[l.Backend]
	done := len(cy.ds)
	cy.measure(n, within)
	f.stretchP50[l.Backend] = append(f.stretchP50[l.Backend], percentile(cy.ds[done:], 50))
}

// results closes the floors' clients and returns what they measured.
func (f *cycleFloors) results(round int) []floorResult {
	var out []floorResult
	for _, b := range f.backends {
		cy := f.cyclers[b]
		cy.close()
		r := floorResult{Backend: b, Op: cycleFloorOps[b], Round: round}
		r.N, r.P50, r.P99, r.RequestsPerCycle, r.Err = cy.result()
		r.StretchP50 = f.stretchP50[b]
		out = append(out, r)
	}
	return out
}

// errFloorHeld is a raw cycle finding its key taken: nothing else uses the
// floor's keys, so the measurement is void.
var errFloorHeld = errors.New("floor: key already held")

// rawRedisCycle takes the key with SET NX (with an expiry) and releases it with the
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
		case <-time.After(20 * time.Second):
			return fail(errors.New("etcd floor watch not created within 20 s"))
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
	if _, err := sampleNotify(ctx, nt, true, warmN, warmFor, nil); err != nil {
		r.Err = err.Error()
		return r
	}
	ds, err := sampleNotify(ctx, nt, false, n, window, make([]time.Duration, 0, min(n, 1<<16)))
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.N, r.P50, r.P99 = len(ds), percentile(ds, 50), percentile(ds, 99)
	return r
}

// sampleNotify times notifications on nt, appending them to ds. A warm-up
// keeps none and runs for at least n samples and at least d; a measurement
// stops at n samples or after d, whichever comes first.
func sampleNotify(ctx context.Context, nt *notifier, warm bool, n int, d time.Duration, ds []time.Duration) ([]time.Duration, error) {
	end := time.Now().Add(d)
	for i := 0; ; i++ {
		enough, late := i >= n, !time.Now().Before(end)
		if warm && enough && late || !warm && (enough || late) {
			return ds, nil
		}
		fired, err := nt.arm(ctx)
		if err != nil {
			return ds, err
		}
		t0 := time.Now()
		if err := nt.fire(ctx); err != nil {
			return ds, err
		}
		select {
		case t1 := <-fired:
			if !warm {
				ds = append(ds, t1.Sub(t0))
			}
		case <-time.After(5 * time.Second):
			return ds, errors.New("no notice within 5 s")
		}
	}
}

// handoffFloorSamples bounds the samples of one hand-off floor measurement;
// the window ends it first.
const handoffFloorSamples = 100000

// handoffFloors measures each backend's notification floor in one round: a
// contended run's warm-up, then its window in all.
type handoffFloors struct {
	s              *servers
	warmup, window time.Duration
	st             *stretches
	ctx            context.Context
	cancel         context.CancelFunc
	notifiers      map[string]*notifier
	samples        map[string][]time.Duration
	stretchP50     map[string][]time.Duration // each stretch's p50
	errs           map[string]error
	backends       []string
}

func newHandoffFloors(s *servers, libs []*library, warmup, window time.Duration) *handoffFloors {
	f := &handoffFloors{s: s, warmup: warmup, window: window, st: newStretches(libs),
		notifiers: map[string]*notifier{}, samples: map[string][]time.Duration{}, stretchP50: map[string][]time.Duration{}, errs: map[string]error{}}
	// The round's contended runs take minutes; this only bounds a stuck
	// server.
	f.ctx, f.cancel = context.WithTimeout(context.Background(), time.Hour)
	return f
}

// before runs the stretch of l's backend's floor that precedes l's runs.
func (f *handoffFloors) before(l *library) {
	first, _, within, ok := f.st.next(l, handoffFloorSamples, f.window)
	if !ok {
		return
	}
	b := l.Backend
	if first {
		f.backends = append(f.backends, b)
		nt, err := newNotifier(f.ctx, f.s, b)
		if err != nil {
			f.errs[b] = err
			return
		}
		f.notifiers[b] = nt
		if _, err := sampleNotify(f.ctx, nt, true, 0, f.warmup, nil); err != nil {
			f.errs[b] = err
			return
		}
	}
	if f.errs[b] != nil {
		return
	}
	done := len(f.samples[b])
	ds, err := sampleNotify(f.ctx, f.notifiers[b], false, handoffFloorSamples-done, within, f.samples[b])
	f.samples[b], f.errs[b] = ds, err
	f.stretchP50[b] = append(f.stretchP50[b], percentile(ds[done:], 50))
}

// results closes the floors' clients and returns what they measured.
func (f *handoffFloors) results(round int) []floorResult {
	defer f.cancel()
	var out []floorResult
	for _, b := range f.backends {
		if nt := f.notifiers[b]; nt != nil {
			nt.close()
		}
		r := floorResult{Backend: b, Op: notifyOps[b], Round: round}
		if err := f.errs[b]; err != nil {
			r.Err = err.Error()
		} else {
			ds := f.samples[b]
			r.N, r.P50, r.P99 = len(ds), percentile(ds, 50), percentile(ds, 99)
			r.StretchP50 = f.stretchP50[b]
		}
		out = append(out, r)
	}
	return out
}

func logFloor(kind string, f floorResult) {
	req := ""
	if f.RequestsPerCycle > 0 {
		req = fmt.Sprintf(" req/cycle %.2f", f.RequestsPerCycle)
	}
	log.Printf("%s floor %-9s n=%d p50 %v p99 %v%s %s", kind, f.Backend, f.N, f.P50, f.P99, req, f.Err)
}
