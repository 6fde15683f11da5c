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
// window, and beside it the same behind another client's write, as each
// release of a contended run is (floors_behind.go). Each is measured in
// every round in stretches, one just before each of its server's
// libraries, so that its samples (as many as a library's) meet the
// conditions of all of them, not of one moment.

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
	// Unordered counts the samples of a floor behind another client's
	// write whose delete was not behind it, left out of N: the server ran
	// the delete first, or the write was answered before the delete was
	// sent.
	Unordered int `json:",omitempty"`
	Err       string
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
	op   string
	arm  func(ctx context.Context) (<-chan time.Time, error)
	fire func(ctx context.Context) error
	// lead, when set, starts another client's write and returns once that
	// write is on the wire, before fire starts (untimed); settle then waits
	// for its answer, removes what it wrote and says whether fire's write
	// was behind it (still pending when fire started, and run first).
	lead  func(ctx context.Context) (settle func(ctx context.Context) (ordered bool, err error), err error)
	close func()
}

// notifyOps names each backend's notification floor.
var notifyOps = map[string]string{
	"redis":     "script DEL + PUBLISH → subscriber on another connection (go-redis)",
	"zookeeper": "delete → watcher of another session (go-zookeeper)",
	"etcd":      "delete → watcher on another client (clientv3)",
}

// notifyBehindOps names each backend's notification floor behind another
// client's write: the write, then the notification as in notifyOps.
var notifyBehindOps = map[string]string{
	"redis":     "a third connection's SET script on the wire, then script DEL + PUBLISH → subscriber (go-redis)",
	"zookeeper": "a third session's create (ephemeral sequential, same parent) on the wire, then delete → watcher (go-zookeeper)",
	"etcd":      "a third client's put with a lease (same prefix) on the wire, then delete → watcher (clientv3)",
}

// rawRedisHandoff frees the key and tells the next waiter in one request,
// as a FIFO hand-off on Redis must.
var rawRedisHandoff = redis.NewScript(`redis.call("del", KEYS[1]) return redis.call("publish", ARGV[1], ARGV[2])`)

// newNotifier opens the two clients of backend's notification floor: the
// releaser and the waiter; behind adds a third, whose write goes ahead of
// each release (floors_behind.go). The two kinds use keys of their own.
func newNotifier(ctx context.Context, s *servers, backend string, behind bool) (*notifier, error) {
	var closers []func()
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	nt := &notifier{op: notifyOps[backend], close: closeAll}
	name := "bench-floor"
	if behind {
		nt.op, name = notifyBehindOps[backend], "bench-floor-w"
	}
	fail := func(err error) (*notifier, error) { closeAll(); return nil, err }
	switch backend {
	case "redis":
		pub := redis.NewClient(&redis.Options{Addr: s.redis.addr})
		subc := redis.NewClient(&redis.Options{Addr: s.redis.addr})
		closers = append(closers, func() { _ = pub.Close() }, func() { _ = subc.Close() })
		sub := subc.Subscribe(ctx, name)
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
			return got, pub.Set(ctx, name, "x", 0).Err()
		}
		nt.fire = func(ctx context.Context) error {
			return rawRedisHandoff.Run(ctx, pub, []string{name}, name, "x").Err()
		}
		if behind {
			lead, close, err := redisLead(ctx, s, name)
			if err != nil {
				return fail(err)
			}
			nt.lead = lead
			closers = append(closers, close)
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
		dir := "/" + name
		node := dir + "/n"
		if _, err := a.Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fail(err)
		}
		nt.arm = func(context.Context) (<-chan time.Time, error) {
			if _, err := a.Create(node, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
				return nil, err
			}
			_, _, ev, err := b.ExistsW(node)
			if err != nil {
				return nil, err
			}
			fired := make(chan time.Time, 1)
			go func() { <-ev; fired <- time.Now() }()
			return fired, nil
		}
		nt.fire = func(context.Context) error { return a.Delete(node, -1) }
		if behind {
			lead, close, err := zkLead(s, dir)
			if err != nil {
				return fail(err)
			}
			nt.lead = lead
			closers = append(closers, close)
		}
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
		key := name
		if behind {
			key = name + "/n"
		}
		wctx, wcancel := context.WithCancel(context.Background())
		closers = append(closers, wcancel)
		// Deletes only: the put that arms a sample is not its notice.
		wch := cb.Watch(wctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
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
			_, err := ca.Put(ctx, key, "x")
			return events, err
		}
		// The delete's revision orders it against the other client's
		// write (etcdLead).
		var deleted int64
		nt.fire = func(ctx context.Context) error {
			resp, err := ca.Delete(ctx, key)
			if err == nil {
				deleted = resp.Header.Revision
			}
			return err
		}
		if behind {
			lead, close, err := etcdLead(ctx, s, name, func() int64 { return deleted })
			if err != nil {
				return fail(err)
			}
			nt.lead = lead
			closers = append(closers, close)
		}
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
	if _, _, err := sampleNotify(ctx, nt, true, warmN, warmFor, nil); err != nil {
		r.Err = err.Error()
		return r
	}
	ds, _, err := sampleNotify(ctx, nt, false, n, window, make([]time.Duration, 0, min(n, 1<<16)))
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.N, r.P50, r.P99 = len(ds), percentile(ds, 50), percentile(ds, 99)
	return r
}

// sampleNotify times notifications on nt, appending them to ds. A warm-up
// keeps none and runs for at least n samples and at least d; a measurement
// stops at n samples or after d, whichever comes first. A sample whose
// release was not behind its lead write is not kept: unordered counts
// those of a measurement.
func sampleNotify(ctx context.Context, nt *notifier, warm bool, n int, d time.Duration, ds []time.Duration) (_ []time.Duration, unordered int, _ error) {
	end := time.Now().Add(d)
	for i := 0; ; i++ {
		enough, late := i >= n, !time.Now().Before(end)
		if warm && enough && late || !warm && (enough || late) {
			return ds, unordered, nil
		}
		fired, err := nt.arm(ctx)
		if err != nil {
			return ds, unordered, err
		}
		var settle func(context.Context) (bool, error)
		if nt.lead != nil {
			if settle, err = nt.lead(ctx); err != nil {
				return ds, unordered, err
			}
		}
		t0 := time.Now()
		if err := nt.fire(ctx); err != nil {
			return ds, unordered, err
		}
		var t1 time.Time
		select {
		case t1 = <-fired:
		case <-time.After(5 * time.Second):
			return ds, unordered, errors.New("no notice within 5 s")
		}
		if settle != nil {
			ordered, err := settle(ctx)
			if err != nil {
				return ds, unordered, err
			}
			if !ordered {
				if !warm {
					unordered++
				}
				continue
			}
		}
		if !warm {
			ds = append(ds, t1.Sub(t0))
		}
	}
}

// handoffFloorSamples bounds the samples of one hand-off floor measurement;
// the window ends it first.
const handoffFloorSamples = 100000

// handoffFloors measures each backend's notification floors in one round,
// each a contended run's warm-up, then its window in all: one
// notification, and one behind another client's write.
type handoffFloors struct {
	s              *servers
	warmup, window time.Duration
	st             *stretches
	ctx            context.Context
	cancel         context.CancelFunc
	lone, behind   *notifyFloor
	backends       []string
}

// notifyFloor is one kind of notification floor in one round, per backend.
type notifyFloor struct {
	behind     bool
	notifiers  map[string]*notifier
	samples    map[string][]time.Duration
	stretchP50 map[string][]time.Duration // each stretch's p50
	unordered  map[string]int
	errs       map[string]error
}

func newNotifyFloor(behind bool) *notifyFloor {
	return &notifyFloor{behind: behind, notifiers: map[string]*notifier{}, samples: map[string][]time.Duration{},
		stretchP50: map[string][]time.Duration{}, unordered: map[string]int{}, errs: map[string]error{}}
}

func newHandoffFloors(s *servers, libs []*library, warmup, window time.Duration) *handoffFloors {
	f := &handoffFloors{s: s, warmup: warmup, window: window, st: newStretches(libs),
		lone: newNotifyFloor(false), behind: newNotifyFloor(true)}
	// The round's contended runs take minutes; this only bounds a stuck
	// server.
	f.ctx, f.cancel = context.WithTimeout(context.Background(), time.Hour)
	return f
}

// before runs the stretches of l's backend's floors that precede l's runs:
// the lone notification's, then the one behind a write.
func (f *handoffFloors) before(l *library) {
	first, _, within, ok := f.st.next(l, handoffFloorSamples, f.window)
	if !ok {
		return
	}
	if first {
		f.backends = append(f.backends, l.Backend)
	}
	f.lone.stretch(f.ctx, f.s, l.Backend, first, f.warmup, within)
	f.behind.stretch(f.ctx, f.s, l.Backend, first, f.warmup, within)
}

// stretch measures backend's floor for within, after opening its clients
// and a warm-up if it is the first.
func (k *notifyFloor) stretch(ctx context.Context, s *servers, b string, first bool, warmup, within time.Duration) {
	if first {
		nt, err := newNotifier(ctx, s, b, k.behind)
		if err != nil {
			k.errs[b] = err
			return
		}
		k.notifiers[b] = nt
		if _, _, err := sampleNotify(ctx, nt, true, 0, warmup, nil); err != nil {
			k.errs[b] = err
			return
		}
	}
	if k.errs[b] != nil {
		return
	}
	done := len(k.samples[b])
	ds, unordered, err := sampleNotify(ctx, k.notifiers[b], false, handoffFloorSamples-done, within, k.samples[b])
	k.samples[b], k.errs[b] = ds, err
	k.unordered[b] += unordered
	k.stretchP50[b] = append(k.stretchP50[b], percentile(ds[done:], 50))
}

// results closes the floor's clients and returns what they measured.
func (k *notifyFloor) results(backends []string, round int) []floorResult {
	ops := notifyOps
	if k.behind {
		ops = notifyBehindOps
	}
	var out []floorResult
	for _, b := range backends {
		if nt := k.notifiers[b]; nt != nil {
			nt.close()
		}
		r := floorResult{Backend: b, Op: ops[b], Round: round, Unordered: k.unordered[b]}
		if err := k.errs[b]; err != nil {
			r.Err = err.Error()
		} else {
			ds := k.samples[b]
			r.N, r.P50, r.P99 = len(ds), percentile(ds, 50), percentile(ds, 99)
			r.StretchP50 = k.stretchP50[b]
		}
		out = append(out, r)
	}
	return out
}

// results closes the floors' clients and returns what they measured: the
// lone notification's and the one behind a write.
func (f *handoffFloors) results(round int) (lone, behind []floorResult) {
	defer f.cancel()
	return f.lone.results(f.backends, round), f.behind.results(f.backends, round)
}

func logFloor(kind string, f floorResult) {
	req := ""
	if f.RequestsPerCycle > 0 {
		req = fmt.Sprintf(" req/cycle %.2f", f.RequestsPerCycle)
	}
	if f.Unordered > 0 {
		req += fmt.Sprintf(" left out (delete not behind the write) %d", f.Unordered)
	}
	log.Printf("%s floor %-9s n=%d p50 %v p99 %v%s %s", kind, f.Backend, f.N, f.P50, f.P99, req, f.Err)
}
