package redisdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// Election tests: the kind "election" on the one queue, Proclaim through
// publish.lua, Observe through the per-key notice channel.

// electionClients makes clients of one deployment for the scenarios, which
// run on a single server and on a Cluster.
type electionClients func(t *testing.T) *dlock.Client

// singleServer starts a Redis server and returns its clients' maker and an
// admin client of it (closed when the test ends).
func singleServer(t *testing.T) (electionClients, *redis.Client) {
	srv := testserver.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	return func(t *testing.T) *dlock.Client {
		return newTestClient(t, testCtx(t), srv.Addr(), nil)
	}, admin
}

func clusterClients(t *testing.T) electionClients {
	addrs := testserver.StartRedisCluster(t, 3)
	url := "redis+cluster://" + strings.Join(addrs, ",")
	return func(t *testing.T) *dlock.Client {
		c, err := dlock.Open(testCtx(t), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// observer follows Observe's channel; next waits for a state that want
// accepts, failing on any state that neither is the previous one nor is
// accepted (Observe must never show an older state after a newer one).
type observer struct {
	t    *testing.T
	ch   <-chan dlock.LeaderInfo
	last dlock.LeaderInfo
	seen []string
}

func describe(i dlock.LeaderInfo) string {
	if !i.HasLeader() {
		return "no leader"
	}
	return fmt.Sprintf("%q (token %d)", i.Value, i.Token)
}

func (o *observer) next(what string, want func(dlock.LeaderInfo) bool) dlock.LeaderInfo {
	o.t.Helper()
	return o.nextVia(what, want, func(dlock.LeaderInfo) bool { return false })
}

// nextVia is next, also accepting the states via accepts on the way.
func (o *observer) nextVia(what string, want, via func(dlock.LeaderInfo) bool) dlock.LeaderInfo {
	o.t.Helper()
	timeout := time.NewTimer(20 * time.Second) // a bound, not a threshold: the step happens at once
	defer timeout.Stop()
	for {
		select {
		case info, ok := <-o.ch:
			if !ok {
				o.t.Fatalf("Observe closed while waiting for %s; saw %v", what, o.seen)
			}
			o.seen = append(o.seen, describe(info))
			if want(info) {
				o.last = info
				return info
			}
			if via(info) {
				o.last = info
				continue
			}
			if info != o.last {
				o.t.Fatalf("Observe sent %s while waiting for %s after %s; saw %v", describe(info), what, describe(o.last), o.seen)
			}
		case <-timeout.C:
			o.t.Fatalf("Observe never sent %s; saw %v", what, o.seen)
		}
	}
}

func leads(value string) func(dlock.LeaderInfo) bool {
	return func(i dlock.LeaderInfo) bool { return i.HasLeader() && i.Value == value }
}

func noLeader(i dlock.LeaderInfo) bool { return !i.HasLeader() }

// campaignAsync campaigns in the background; the result comes on the channel.
func campaignAsync(ctx context.Context, c *dlock.Client, key, value string, opts ...dlock.LockOption) <-chan *dlock.Leadership {
	out := make(chan *dlock.Leadership, 1)
	go func() {
		l, err := c.Election(key).Campaign(ctx, value, opts...)
		if err != nil {
			l = nil
		}
		out <- l
	}()
	return out
}

func receiveTerm(t *testing.T, ch <-chan *dlock.Leadership, who string) *dlock.Leadership {
	t.Helper()
	select {
	case l := <-ch:
		if l == nil {
			t.Fatalf("%s's Campaign failed", who)
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never became leader", who)
	}
	return nil
}

// observeScenario: Observe sees, in order, no leader, A, A's new value, B
// after A resigns, and no leader after B resigns; Campaign hands over in
// arrival order (B before C).
func observeScenario(t *testing.T, newClient electionClients) {
	ctx := testCtx(t)
	const key = "elect/observe"
	a, b, cc, watcher := newClient(t), newClient(t), newClient(t), newClient(t)
	o := &observer{t: t, ch: watcher.Election(key).Observe(ctx)}
	o.next("the first state", noLeader)

	la, err := a.Election(key).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	info := o.next("A", leads("a"))
	if info.Token != la.Token() {
		t.Fatalf("observed token %d, A's is %d", info.Token, la.Token())
	}
	if err := la.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	o.next("A's new value", leads("a2"))

	bch := campaignAsync(ctx, b, key, "b")
	waitWaiters(t, ctx, watcher, key, 1)
	cch := campaignAsync(ctx, cc, key, "c")
	waitWaiters(t, ctx, watcher, key, 2)
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lb := receiveTerm(t, bch, "B")
	if info := o.next("B after A resigned", leads("b")); info.Token != lb.Token() || lb.Token() <= la.Token() {
		t.Fatalf("B's token %d (observed %d), A's %d", lb.Token(), info.Token, la.Token())
	}
	select {
	case <-cch:
		t.Fatal("C, who came after B, was elected with B")
	default:
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lc := receiveTerm(t, cch, "C")
	o.next("C after B resigned", leads("c"))
	if err := lc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o.next("no leader after C resigned", noLeader)
}

func TestElection_observe(t *testing.T) {
	clients, _ := singleServer(t)
	observeScenario(t, clients)
}

// The same on a three-master Cluster: the notices are PUBLISHed from the
// key's node and reach the watcher's subscription on whichever node it is.
func TestElection_observeCluster(t *testing.T) {
	observeScenario(t, clusterClients(t))
}

// The key is stored as an election, and is refused as a lock meanwhile.
func TestElection_kind(t *testing.T) {
	clients, _ := singleServer(t)
	ctx := testCtx(t)
	c := clients(t)
	l, err := c.Election("elect/kind").Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "elect/kind")
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != dlock.KindElection || info.Limit != 1 || len(info.Holders) != 1 || info.Holders[0].Value != "v" {
		t.Fatalf("Inspect: kind %v limit %d holders %+v", info.Kind, info.Limit, info.Holders)
	}
	if _, err := c.TryLock(ctx, "elect/kind"); !errors.Is(err, dlock.ErrKindMismatch) {
		t.Fatalf("TryLock of an election: %v, want ErrKindMismatch", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// Proclaim writes the value only: publish.lua keeps the holder record's
// owner, times and token (no renewal), and writing the same value twice is
// no error. The record's layout is Redis's own; the suite's
// Election_leaderInfo and Election_proclaimAfterLossFails check what any
// backend's Proclaim does.
func TestElection_proclaimWritesOnlyTheValue(t *testing.T) {
	clients, admin := singleServer(t)
	ctx := testCtx(t)
	const key = "elect/proclaim"
	la, err := clients(t).Election(key).Campaign(ctx, "a", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before := holderRecord(t, admin, key)
	for range 2 {
		if err := la.Proclaim(ctx, "a2"); err != nil {
			t.Fatal(err)
		}
	}
	after := holderRecord(t, admin, key)
	if cut(before, 6) != cut(after, 6) || !strings.Contains(after, `"a2"`) {
		t.Fatalf("Proclaim changed %q into %q: want the same owner, times and token, and the new value", before, after)
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// holderRecord returns the election's one holder record, raw, with its
// metadata at the end as in a record of its own field.
func holderRecord(t *testing.T, admin *redis.Client, key string) string {
	t.Helper()
	h, err := admin.HGetAll(testCtx(t), redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := h["o"]; ok {
		return o + h["m"] // the holder in 'o' keeps its metadata in 'm'
	}
	for f, v := range h {
		if f != "k" && f != "t" && f != "p" && f != "q" && f != "m" {
			return v
		}
	}
	t.Fatalf("no holder record in %v", h)
	return ""
}

// cut returns the first n |-separated fields of s.
func cut(s string, n int) string {
	return strings.Join(strings.SplitN(s, "|", n+1)[:n], "|")
}

// A leader cut off from the server (a blackholed link: no release, no
// script) is replaced by the waiting candidate after its TTL; the observer
// sees the successor, and the old leader's Done had closed by then.
func TestElection_observeKilledLeaderSuccessor(t *testing.T) {
	srv := testserver.StartRedis(t)
	h := newHarness(t, srv)
	ctx := testCtx(t)
	const key = "elect/killed"
	a, link, err := h.NewFaultyClient(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b, watcher := newTestClient(t, ctx, srv.Addr(), nil), newTestClient(t, ctx, srv.Addr(), nil)
	o := &observer{t: t, ch: watcher.Election(key).Observe(ctx)}
	o.next("the first state", noLeader)
	la, err := a.Election(key).Campaign(ctx, "a", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	o.next("A", leads("a"))
	bch := campaignAsync(ctx, b, key, "b")
	waitWaiters(t, ctx, watcher, key, 1)
	link.Blackhole()
	defer link.Restore()
	// The watch wakes at A's deadline by itself and may read the key
	// between A's record dying and B's poll taking its place: "no leader"
	// is then a true state on the way.
	info := o.nextVia("B, after A's TTL", leads("b"), noLeader)
	select {
	case <-la.Done():
	default:
		t.Fatal("the observer saw B elected before A's Done closed")
	}
	lb := receiveTerm(t, bch, "B")
	if info.Token != lb.Token() || lb.Token() <= la.Token() {
		t.Fatalf("B's token %d (observed %d), A's %d", lb.Token(), info.Token, la.Token())
	}
}

// With no candidate, a leader that dies runs no script and sends no notice:
// the watch wakes at its deadline (from the latest read) and the observer
// sees "no leader". Without the deadline wake, Observe would show the dead
// leader for ever.
func TestElection_observeKilledLeaderNoCandidate(t *testing.T) {
	srv := testserver.StartRedis(t)
	h := newHarness(t, srv)
	ctx := testCtx(t)
	const key = "elect/killed-alone"
	a, link, err := h.NewFaultyClient(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	watcher := newTestClient(t, ctx, srv.Addr(), nil)
	o := &observer{t: t, ch: watcher.Election(key).Observe(ctx)}
	o.next("the first state", noLeader)
	la, err := a.Election(key).Campaign(ctx, "a", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	o.next("A", leads("a"))
	link.Blackhole()
	defer link.Restore()
	o.next("no leader after A's TTL", noLeader)
	select {
	case <-la.Done():
	default:
		t.Fatal("the observer saw A's term over before A's Done closed")
	}
}

// countingHook counts the commands a client sends (Pub/Sub's own aside).
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Observe does not poll: over an idle window, with nobody leading and with
// a leader whose deadline is far off, the observer's client sends nothing,
// and the server runs no script but the leader's renewals. (A polling
// Observe fails at once; the window's length only bounds how much polling
// could hide.)
func TestElection_observeIdleSendsNothing(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	hook := &countingHook{}
	rdb.AddHook(hook)
	watcher, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	leader := newTestClient(t, ctx, srv.Addr(), nil)
	const key = "elect/idle"
	o := &observer{t: t, ch: watcher.Election(key).Observe(ctx)}
	o.next("the first state", noLeader)

	idle := func(what string, window time.Duration) {
		t.Helper()
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		sent := hook.n.Load()
		select {
		case info := <-o.ch:
			t.Fatalf("%s: Observe sent %s with nothing changed", what, describe(info))
		case <-time.After(window):
		}
		if n := hook.n.Load() - sent; n != 0 {
			t.Fatalf("%s: the observer's client sent %d commands over an idle window", what, n)
		}
		stats := commandStats(t, ctx, admin)
		// EVALSHA: the leader's renewals only (every 10 s with this TTL).
		if stats["evalsha"] > stats["hmget"] {
			t.Fatalf("%s: the server ran scripts other than renewals: %v", what, stats)
		}
	}
	idle("nobody leading", 500*time.Millisecond)
	l, err := leader.Election(key).Campaign(ctx, "v", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	o.next("the leader", leads("v"))
	idle("a leader with 30s left", 500*time.Millisecond)
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o.next("no leader", noLeader)

	// A leader whose deadline passes several times over the window, each
	// time renewed: its renewal notices move the observers' wakes, so they
	// read nothing (before, each deadline made each observer read once).
	l, err = leader.Election(key).Campaign(ctx, "w", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	o.next("the short-lived leader", leads("w"))
	idle("a leader renewing every 100ms", 1200*time.Millisecond)
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o.next("no leader again", noLeader)
}

// A lock's scripts publish nothing on the observers' channel: locks pay
// nothing for elections.
func TestElection_locksPublishNothing(t *testing.T) {
	clients, admin := singleServer(t)
	ctx := testCtx(t)
	c := clients(t)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := commandStats(t, ctx, admin)["publish"]; n != 0 {
		t.Fatalf("a lock's grant and release published %d notices", n)
	}
}

// Watches that come and go on one channel (SUBSCRIBE, UNSUBSCRIBE in
// flight) each get their first value only once subscribed, and the
// subscription goes with the last watch.
func TestElection_watchChurn(t *testing.T) {
	clients, admin := singleServer(t)
	ctx := testCtx(t)
	watcher, leader := clients(t), clients(t)
	const key = "elect/churn"
	for i := range 50 {
		wctx, cancel := context.WithCancel(ctx)
		ch := watcher.Election(key).Observe(wctx)
		select {
		case info := <-ch:
			if info.HasLeader() {
				t.Fatalf("round %d: %s", i, describe(info))
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: no first state", i)
		}
		if i%2 == 1 {
			cancel() // leave at once: UNSUBSCRIBE, then the next SUBSCRIBE
			continue
		}
		leadAndResign(t, ctx, leader, key, fmt.Sprint(i), &observer{t: t, ch: ch}, "the leader")
		cancel()
	}
	channel := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key) + ":n"
	for range 2000 {
		n, err := admin.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[channel] == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded
	}
	t.Fatalf("%s still has subscribers after every watch ended", channel)
}

// After the Pub/Sub connection is killed, go-redis subscribes again and the
// watch goes on: a change made after the reconnect is seen.
func TestElection_observeAfterReconnect(t *testing.T) {
	clients, admin := singleServer(t)
	ctx := testCtx(t)
	watcher, leader := clients(t), clients(t)
	const key = "elect/reconnect"
	o := &observer{t: t, ch: watcher.Election(key).Observe(ctx)}
	o.next("the first state", noLeader)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	leadAndResign(t, ctx, leader, key, "v", o, "the leader, after the reconnect")
}

var _ dlocktest.Link = (*dlocktest.Proxy)(nil)

// leadAndResign campaigns with c on key for value, has o see it lead (what
// names that state), resigns and has o see no leader.
func leadAndResign(t *testing.T, ctx context.Context, c *dlock.Client, key, value string, o *observer, what string) {
	t.Helper()
	l, err := c.Election(key).Campaign(ctx, value)
	if err != nil {
		t.Fatal(err)
	}
	o.next(what, leads(value))
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o.next("no leader", noLeader)
}
