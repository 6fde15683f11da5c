package etcddlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// campaignAsync campaigns in a goroutine; the term (or error) arrives on
// the returned channel.
func campaignAsync(ctx context.Context, c *dlock.Client, key, value string, opts ...dlock.LockOption) <-chan termOrErr {
	out := make(chan termOrErr, 1)
	go func() {
		term, err := c.Election(key).Campaign(ctx, value, opts...)
		out <- termOrErr{term, err}
	}()
	return out
}

type termOrErr struct {
	term *dlock.Leadership
	err  error
}

// awaitTerm waits for a campaign started with campaignAsync.
func awaitTerm(t *testing.T, ctx context.Context, ch <-chan termOrErr, who string) *dlock.Leadership {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: campaign: %v", who, r.err)
		}
		return r.term
	case <-ctx.Done():
		t.Fatalf("%s not elected (watchdog)", who)
	}
	return nil
}

// openClient opens a dlock client of url, closed when the test ends.
func openClient(t *testing.T, ctx context.Context, url string) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// notYet fails the test if the campaign has returned.
func notYet(t *testing.T, ch <-chan termOrErr, who string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s elected out of turn (err %v)", who, r.err)
	default:
	}
}

// wantLeader checks Leader's answer.
func wantLeader(t *testing.T, ctx context.Context, c *dlock.Client, key, value string, token uint64) {
	t.Helper()
	info, err := c.Election(key).Leader(ctx)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	if info.Value != value || info.Token != token {
		t.Fatalf("Leader = %q token %d, want %q token %d", info.Value, info.Token, value, token)
	}
}

// Campaigns queue as an election (kind label "election" in every entry's
// header) and are elected in arrival order; Resign hands over at once to
// the next candidate, whose token is higher; Inspect reports the kind.
func TestElection_resignHandsOverInArrivalOrder(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "elect-order/" + t.Name()
	c := make([]*dlock.Client, 3)
	for i := range c {
		c[i] = openClient(t, ctx, srv.URL())
	}
	a, err := c[0].Election(key).Campaign(ctx, "a", longTTL)
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(t, ctx, c[0], key, "a", a.Token())
	bch := campaignAsync(ctx, c[1], key, "b", longTTL)
	waitWaiters(t, ctx, c[0], key, 1)
	cch := campaignAsync(ctx, c[2], key, "c", longTTL)
	waitWaiters(t, ctx, c[0], key, 2)

	info, err := c[0].Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != dlock.KindElection || len(info.Holders) != 1 || info.Holders[0].Value != "a" ||
		len(info.Waiters) != 2 || info.Waiters[0].Value != "b" || info.Waiters[1].Value != "c" {
		t.Fatalf("Inspect = %+v, want election led by a, b and c waiting in order", info)
	}
	// The key is an election's: a lock is refused, and leaves nothing.
	if _, err := c[2].TryLock(ctx, key); !errors.Is(err, dlock.ErrKindMismatch) {
		t.Fatalf("TryLock on an election: %v, want ErrKindMismatch", err)
	}

	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := awaitTerm(t, ctx, bch, "b")
	notYet(t, cch, "c")
	if b.Token() <= a.Token() {
		t.Fatalf("b's token %d not above a's %d", b.Token(), a.Token())
	}
	wantLeader(t, ctx, c[0], key, "b", b.Token())
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	cl := awaitTerm(t, ctx, cch, "c")
	if cl.Token() <= b.Token() {
		t.Fatalf("c's token %d not above b's %d", cl.Token(), b.Token())
	}
	wantLeader(t, ctx, c[0], key, "c", cl.Token())
	if err := cl.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c[0].Election(key).Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader after the last resign: %v, want ErrNoLeader", err)
	}
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}

// A grant's Publish writes only its own entry: after its release, the next
// call on the same lease (the driver reuses leases, and entry names with
// them) creates an entry of the same name, which the old grant's Publish
// must not overwrite. The create revision in the Txn's compare is what
// tells them apart.
func TestPublish_staleGrantOnReusedLease(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "elect-stale/" + t.Name()
	d, err := etcddlock.OpenDriverForTest(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	req := func(md string) *driver.AcquireRequest {
		return &driver.AcquireRequest{Key: key, Owner: "00000000000000000000000000000001", TTL: time.Minute,
			Metadata: []byte(md), Wait: true, Kind: driver.KindElection, Limit: 1, Mode: driver.Exclusive}
	}
	g1, err := d.Acquire(ctx, req(`{"value":"one"}`))
	if err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, srv.Addr())
	k1, _, _ := entry(t, ctx, admin, key)
	if err := g1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g2, err := d.Acquire(ctx, req(`{"value":"two"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Release(ctx)
	k2, _, _ := entry(t, ctx, admin, key)
	if k1 != k2 {
		t.Logf("lease not reused (%s, then %s): the test checks less", k1, k2)
	}
	if err := g1.(driver.Publisher).Publish(ctx, []byte(`{"value":"stale"}`)); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("stale Publish: %v, want ErrNotHeld", err)
	}
	resp, err := admin.Get(ctx, k2)
	if err != nil {
		t.Fatal(err)
	}
	if want := "\x00election\x00x" + `{"value":"two"}`; len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
		t.Fatalf("entry after a stale Publish = %q, want %q", resp.Kvs, want)
	}
	if err := g2.(driver.Publisher).Publish(ctx, []byte(`{"value":"three"}`)); err != nil {
		t.Fatal(err)
	}
	if resp, err = admin.Get(ctx, k2); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 ||
		string(resp.Kvs[0].Value) != "\x00election\x00x"+`{"value":"three"}` {
		t.Fatalf("entry after Publish = %v (%v), want the new value on the lease", resp.Kvs, err)
	}
}

// A Proclaim whose reply is lost after etcd applied it is retried, and the
// retry succeeds: Publish is idempotent while the term lasts.
func TestElection_proclaimLostReply(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "elect-lost/" + t.Name()
	cnt := newCounter()
	c := cnt.client(t, ctx, srv.Addr())
	term, err := c.Election(key).Campaign(ctx, "v1", longTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	cnt.take()
	cnt.dropNextReply(putApplied)
	if err := term.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if sent, _ := cnt.take(); sent["dropped"] != 1 {
		t.Fatalf("no reply dropped: %v", sent)
	}
	wantLeader(t, ctx, c, key, "v2", term.Token())
}

// A candidate waiting behind a leader ignores the leader's Proclaims: a
// Publish rewrites the leader's entry, which the candidate watches (for its
// delete and its release marker); a candidate that took the put for a
// grant notice (as a semaphore's waiter once did) would read the queue at every Proclaim (and, as the
// entry's mod revision no longer matches its create revision, at every
// watch start and every check after it). Pins: no queue reads.
func TestElection_candidateIgnoresProclaims(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "elect-ignore/" + t.Name()
	leader := openClient(t, ctx, srv.URL())
	a, err := leader.Election(key).Campaign(ctx, "a0", longTTL)
	if err != nil {
		t.Fatal(err)
	}
	cnt := newCounter()
	cand := cnt.client(t, ctx, srv.Addr())
	bch := campaignAsync(ctx, cand, key, "b", longTTL)
	cnt.waitCreated(t, ctx, 2) // the driver's anchor, and the candidate's watch
	waitWaiters(t, ctx, leader, key, 1)
	cnt.take()
	const n = 5
	for i := range n {
		if err := a.Proclaim(ctx, "a"+string(rune('1'+i))); err != nil {
			t.Fatal(err)
		}
	}
	// The candidate has received the puts: whatever it does with them it
	// does before it handles the release, which comes after them on the
	// same watch.
	cnt.mu.Lock()
	cnt.waitLocked(ctx, func() bool { return len(cnt.puts) >= n })
	cnt.mu.Unlock()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := awaitTerm(t, ctx, bch, "b")
	defer b.Resign(ctx)
	sent, _ := cnt.take()
	if sent[queueRead] != 0 || sent[rangeMethod] != 0 || sent["watch create"] != 0 {
		t.Fatalf("the candidate sent %v while the leader proclaimed %d times: want no read, no new watch", sent, n)
	}
}

// observed reads the next state from an Observe channel.
func observed(t *testing.T, ctx context.Context, ch <-chan dlock.LeaderInfo, what string) dlock.LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-ch:
		if !ok {
			t.Fatalf("Observe closed, waiting for %s", what)
		}
		return info
	case <-ctx.Done():
		t.Fatalf("Observe: no %s (watchdog)", what)
	}
	return dlock.LeaderInfo{}
}

// wantObserved checks the next state from Observe.
func wantObserved(t *testing.T, ctx context.Context, ch <-chan dlock.LeaderInfo, value string, token uint64) {
	t.Helper()
	info := observed(t, ctx, ch, "state "+value)
	if info.Value != value || info.Token != token {
		t.Fatalf("Observe = %q token %d, want %q token %d", info.Value, info.Token, value, token)
	}
}

// Observe sees, in order and nothing else: the leader a, a's new value,
// b after a resigns, nobody after b resigns. A candidate joining sends no
// state (its join wakes the watch; the read finds the same leader). Then,
// with nothing changing, the observer's client sends nothing at all for
// as long as the leader renews its lease six times: no polling.
func TestElection_observe(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "elect-observe/" + t.Name()
	ca := openClient(t, ctx, srv.URL())
	cb := openClient(t, ctx, srv.URL())
	ocnt := newCounter()
	obs := ocnt.client(t, ctx, srv.Addr())
	octx, stop := context.WithCancel(ctx)
	defer stop()

	ch := obs.Election(key).Observe(octx)
	if info := observed(t, ctx, ch, "initial state"); info.HasLeader() {
		t.Fatalf("initial state %+v, want no leader", info)
	}
	a, err := ca.Election(key).Campaign(ctx, "a", longTTL)
	if err != nil {
		t.Fatal(err)
	}
	wantObserved(t, ctx, ch, "a", a.Token())
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	wantObserved(t, ctx, ch, "a2", a.Token())
	bch := campaignAsync(ctx, cb, key, "b", longTTL)
	waitWaiters(t, ctx, ca, key, 1)
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := awaitTerm(t, ctx, bch, "b")
	wantObserved(t, ctx, ch, "b", b.Token())

	// Idle: b leads with a lease renewed every 20 s (longTTL); a second
	// client with a 1 s lease renews every third of a second and serves as
	// the clock of the window, with no sleep.
	ccnt := newCounter()
	clock := ccnt.client(t, ctx, srv.Addr())
	held, err := clock.Lock(ctx, key+"-clock", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ocnt.take()
	ccnt.take()
	ccnt.waitSent(t, ctx, "keep-alive", 6)
	if sent, _ := ocnt.take(); total(sent) != 0 {
		t.Fatalf("the observer sent %v while nothing changed: want nothing", sent)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case info := <-ch:
		t.Fatalf("Observe sent %+v with no change", info)
	default:
	}

	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info := observed(t, ctx, ch, "no leader"); info.HasLeader() {
		t.Fatalf("Observe = %+v after the last resign, want no leader", info)
	}
	stop()
	for range ch { // closed when octx ends
	}
}

// A leader cut off from etcd is replaced after its TTL, and the observer
// sees the successor only after the old leader's Done has closed (the lease
// engine ends the term before etcd can expire the lease). The expiry is
// learnt from etcd's delete of the expired lease's entry, a notification.
func TestElection_observeExpiredLeader(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "elect-expire/" + t.Name()
	p := dlocktest.NewProxy(t, srv.Addr())
	ca := openClient(t, ctx, "etcd://"+p.Addr())
	cb := openClient(t, ctx, srv.URL())
	obs := openClient(t, ctx, srv.URL())

	a, err := ca.Election(key).Campaign(ctx, "a", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch := obs.Election(key).Observe(octx)
	wantObserved(t, ctx, ch, "a", a.Token())
	bch := campaignAsync(ctx, cb, key, "b", dlock.WithTTL(time.Second))
	waitWaiters(t, ctx, obs, key, 1)

	p.Blackhole()
	info := observed(t, ctx, ch, "b")
	select {
	case <-a.Done():
	default:
		t.Fatalf("observer saw %+v while the old leader's Done was open", info)
	}
	b := awaitTerm(t, ctx, bch, "b")
	if info.Value != "b" || info.Token != b.Token() || b.Token() <= a.Token() {
		t.Fatalf("Observe = %+v, want b with token %d above a's %d", info, b.Token(), a.Token())
	}
	if err := a.Proclaim(ctx, "a-again"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Proclaim of the expired leader: %v, want ErrNotHeld", err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	p.Restore()
}

// Watch's channel gets its first value only once etcd has created the
// watch, and a change right after that first value is never missed: here
// the change is written as soon as the first value arrives. It is closed
// when ctx ends, and Watch on a closed driver fails with ErrClosed.
func TestWatch_firstValueThenChanges(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "elect-watch/" + t.Name()
	d, err := etcddlock.OpenDriverForTest(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	admin := adminClient(t, srv.Addr())
	obs := d.(driver.Observer)
	for round := range 3 {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := obs.Watch(wctx, key)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("no first value (watchdog)")
		}
		// A put of a marker-like key is no entry: nothing. An entry: a value.
		dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
		if _, err := admin.Put(ctx, dir+"0000000000000001/released", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Txn(ctx).Then(clientv3.OpPut(dir+"0000000000000001", "{}"),
			clientv3.OpDelete(dir+"0000000000000001/released")).Commit(); err != nil {
			t.Fatal(err)
		}
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("round %d: closed before the change", round)
			}
		case <-ctx.Done():
			t.Fatalf("round %d: change missed (watchdog)", round)
		}
		if _, err := admin.Delete(ctx, dir, clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		cancel()
		for range ch { // closed when wctx ends
		}
	}
	_ = d.Close()
	if _, err := obs.Watch(ctx, key); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}

// An observer whose watch stream breaks while the leader proclaims, and
// whose resume revision is compacted by then, still sees the new value:
// etcd refuses the resumed watch (compacted), the driver closes the
// channel, and Observe watches again and reads the state. Nothing in
// between is polled.
func TestElection_observeAcrossCompaction(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "elect-compact/" + t.Name()
	ca := openClient(t, ctx, srv.URL())
	p := dlocktest.NewProxy(t, srv.Addr())
	obs := openClient(t, ctx, "etcd://"+p.Addr())
	a, err := ca.Election(key).Campaign(ctx, "a", longTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch := obs.Election(key).Observe(octx)
	wantObserved(t, ctx, ch, "a", a.Token())

	p.Blackhole()
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, srv.Addr())
	resp, err := admin.Get(ctx, "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	p.Reset() // what the proxy held is lost
	p.Restore()
	wantObserved(t, ctx, ch, "a2", a.Token())
}
