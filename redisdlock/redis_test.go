package redisdlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newTestClient(t *testing.T, ctx context.Context, addr string, opts *redisdlock.Options) *dlock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redisdlock.New(ctx, rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// commandStats returns the number of calls per command since the last
// CONFIG RESETSTAT. Redis 7 counts commands run inside scripts too.
func commandStats(t *testing.T, ctx context.Context, admin *redis.Client) map[string]int {
	t.Helper()
	s, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// waitWaiters waits until key has n waiters queued.
func waitWaiters(t *testing.T, ctx context.Context, c *dlock.Client, key string, n int) {
	t.Helper()
	dlocktest.WaitWaiters(t, ctx, c, key, n)
}

// costRig starts a server for counting commands, with the scripts loaded
// (no NOSCRIPT retries in the counts) and options under which only
// notifications drive hand-offs: polls every hour.
func costRig(t *testing.T) (*testserver.Redis, context.Context, *redis.Client, *redisdlock.Options) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	opts := &redisdlock.Options{WaiterTimeout: 2 * time.Hour, PollInterval: time.Hour}
	warm := newTestClient(t, ctx, srv.Addr(), opts)
	if l, err := warm.Lock(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return srv, ctx, admin, opts
}

// A release wakes only the next waiter: with 2 or 20 waiters, every hand-off
// costs exactly one script call (the release) and one PUBLISH, the script
// runs no more commands than it must (server time is latency), and waiting
// costs nothing once queued — polling is set to an hour so that only
// notifications can drive the hand-offs.
func TestHandOff_costDoesNotGrowWithWaiters(t *testing.T) {
	const handOffCommands, releaseCommands = 9, 3

	srv, ctx, admin, opts := costRig(t)
	for _, n := range []int{2, 20} {
		key := fmt.Sprintf("handoff-%d", n)
		holder := newTestClient(t, ctx, srv.Addr(), opts)
		lh, err := holder.Lock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		var order []int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			c := newTestClient(t, ctx, srv.Addr(), opts)
			wg.Go(func() {
				l, err := c.Lock(ctx, key, dlock.WithTTL(time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			})
			waitWaiters(t, ctx, holder, key, i+1) // arrival order is i
		}
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := lh.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		stats := commandStats(t, ctx, admin)
		scripts := stats["evalsha"] + stats["eval"]
		if scripts != n+1 || stats["publish"] != n {
			t.Errorf("%d waiters: %d script calls and %d PUBLISH for %d hand-offs, want %d and %d (one release each, one waiter woken each)",
				n, scripts, stats["publish"], n, n+1, n)
		}
		// The server work inside the scripts: a hand-off runs HMGET, LPOP,
		// HGET, HDEL, TIME, HSET, PEXPIRE, GETSET (the slot's record),
		// PUBLISH; the last release, with nobody waiting, HMGET, LPOP (the
		// queue existed), RENAME (to the slot's trace).
		if inner, want := innerCommands(stats), handOffCommands*n+releaseCommands; inner > want {
			t.Errorf("%d waiters: %d commands inside the scripts, want at most %d (%d per hand-off, %d for the last release): %v",
				n, inner, want, handOffCommands, releaseCommands, stats)
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("%d waiters: served in order %v, want arrival order", n, order)
			}
		}
	}
}

// innerCommands sums the commands run inside scripts in stats: everything
// but the script calls themselves and the test's own commands.
func innerCommands(stats map[string]int) int {
	n := 0
	for cmd, calls := range stats {
		switch cmd {
		case "evalsha", "eval", "config|resetstat", "ping", "info", "llen":
		default:
			n += calls
		}
	}
	return n
}

// A free key's acquire.lua request and reply stay as small as measured
// (bench/analysis.md, Profile: Redis uncontended cycle): 5 keys, not the
// release trace (each costs the server a Lua string at every run), at most 8
// arguments after the keys, since Redis builds ARGV as a Lua table that
// grows by doubling (a ninth re-hashes it into 16 slots at every run), and
// the grant answered with its token alone, a string, not an array that the
// server would build as a Lua table and convert.
func TestAcquire_freeKeyRequestAndReply(t *testing.T) {
	ctx := testCtx(t)
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &acquireRecorder{}
	rdb.AddHook(h)
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var token uint64
	// Twice: the first cycle may find the scripts not loaded (EVAL).
	for range 2 {
		l, err := c.Lock(ctx, "small-acquire")
		if err != nil {
			t.Fatal(err)
		}
		token = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.args == nil {
		t.Fatal("no acquire.lua request seen")
	}
	keys, err := strconv.Atoi(fmt.Sprint(h.args[2]))
	if err != nil {
		t.Fatalf("EVALSHA's number of keys %v: %v", h.args[2], err)
	}
	if keys > 5 {
		t.Errorf("acquire.lua sent %d keys, want 5", keys)
	}
	if n := len(h.args) - 3 - keys; n > 8 {
		t.Errorf("acquire.lua sent %d arguments after its %d keys, want at most 8", n, keys)
	}
	if s, ok := h.reply.(string); !ok || s != strconv.FormatUint(token, 10) {
		t.Errorf("a free key's grant was answered %#v, want its token %d alone, as a string", h.reply, token)
	}
}

// acquireRecorder is a go-redis hook that keeps the latest acquire.lua
// request's arguments and its reply.
type acquireRecorder struct {
	mu    sync.Mutex
	args  []any
	reply any
}

func (h *acquireRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *acquireRecorder) record(cmd redis.Cmder) {
	a := cmd.Args()
	if len(a) < 3 || a[0] != "evalsha" || a[1] != redisdlock.AcquireScriptHashForTest() || cmd.Err() != nil {
		return
	}
	if c, ok := cmd.(*redis.Cmd); ok {
		h.mu.Lock()
		h.args, h.reply = append([]any(nil), a...), c.Val()
		h.mu.Unlock()
	}
}

func (h *acquireRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.record(cmd)
		return err
	}
}

func (h *acquireRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.record(c)
		}
		return err
	}
}

// The scripts' other paths run no more commands than docs/redis.md lists:
// an uncontended Lock and Unlock, the first waiter joining a queue (which
// creates it), and a second one.
func TestScripts_commandsPerPath(t *testing.T) {
	srv, ctx, admin, opts := costRig(t)
	holder := newTestClient(t, ctx, srv.Addr(), opts)
	measure := func(what string, want int, f func()) map[string]int {
		t.Helper()
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		f()
		stats := commandStats(t, ctx, admin)
		if got := innerCommands(stats); got > want {
			t.Errorf("%s: %d commands inside the scripts, want at most %d: %v", what, got, want, stats)
		}
		return stats
	}
	// A free key's fast path EXISTS TIME GETSET HSET PEXPIRE, then HMGET
	// RENAME: nobody ever queued, so no LPOP.
	measure("uncontended Lock and Unlock", 7, func() {
		l, err := holder.Lock(ctx, "cycle")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
	lh, err := holder.Lock(ctx, "queue", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Clients made up front: their connection set-up is not counted.
	first, second := newTestClient(t, ctx, srv.Addr(), opts), newTestClient(t, ctx, srv.Addr(), opts)
	join := func(c *dlock.Client) {
		wg.Go(func() {
			if l, err := c.Lock(ctx, "queue", dlock.WithTTL(time.Minute)); err != nil {
				t.Error(err)
			} else {
				_ = l.Unlock(ctx)
			}
		})
	}
	// Wait with LLEN (not counted), not Inspect, which runs a script.
	queued := func(n int64) {
		t.Helper()
		q := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, "queue") + ":q"
		for admin.LLen(ctx, q).Val() != n {
			select {
			case <-ctx.Done():
				t.Fatalf("%d waiters never queued (watchdog)", n)
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	// A lock's join takes its fast path (acquire_join.lua), which reads the
	// holder with HMGET, not HGETALL: EXISTS (the free key's test) HMGET
	// TIME HSETNX RPUSH, HSET of the hash's 'q' (its release must read the
	// queue), and PEXPIRE ×2 for the new queue (no PTTL: a new queue has no
	// expiry).
	for _, stats := range []map[string]int{
		measure("first waiter", 8, func() { join(first); queued(1) }),
		// EXISTS HMGET TIME HSETNX RPUSH PTTL ('q' is there).
		measure("second waiter", 6, func() { join(second); queued(2) }),
	} {
		if stats["hgetall"] != 0 {
			t.Errorf("a lock's join ran the general path (HGETALL): %v", stats)
		}
	}
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A hand-off notice lost with the Pub/Sub connection does not strand the
// waiter: after go-redis resubscribes, or at the latest at the next poll,
// the waiter finds it holds the key.
func TestLock_lostNoticeRecoveredByPoll(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	opts := &redisdlock.Options{WaiterTimeout: 3 * time.Second, PollInterval: 200 * time.Millisecond}
	holder := newTestClient(t, ctx, srv.Addr(), opts)
	waiter := newTestClient(t, ctx, srv.Addr(), opts)
	lh, err := holder.Lock(ctx, "lost-notice")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, "lost-notice")
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitWaiters(t, ctx, holder, "lost-notice", 1)
	// Drop every subscriber, then release: the notice goes nowhere.
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("waiter never learned it was granted the key (watchdog)")
	}
}

// lossyDialer drops the reply to the first acquire.lua call it sees after
// being armed: the server runs the script, the client never hears back and
// its connection breaks, as when a network fails at the worst moment.
type lossyDialer struct {
	armed atomic.Bool
	hash  []byte
	hits  atomic.Int32
}

func (d *lossyDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, d: d}, nil
}

type lossyConn struct {
	net.Conn
	d        *lossyDialer
	dropNext atomic.Bool
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.d.hash) && c.d.armed.CompareAndSwap(true, false) {
		c.dropNext.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	if c.dropNext.CompareAndSwap(true, false) {
		// Let the server finish, then lose its reply with the connection.
		n, err := c.Conn.Read(b)
		_ = c.Conn.Close()
		c.d.hits.Add(1)
		if err == nil {
			err = fmt.Errorf("injected: reply of %d bytes lost", n)
		}
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: err}
	}
	return c.Conn.Read(b)
}

// A TryLock and a Lock whose reply is lost after the server granted the key:
// the retry (by go-redis, on a new connection) recognises the caller's own
// grant by its owner id. Nothing is orphaned and nobody blocks on itself.
func TestAcquire_lostReplyRetriedFindsOwnGrant(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	other := newTestClient(t, ctx, srv.Addr(), nil)
	for _, wait := range []bool{false, true} {
		ld := &lossyDialer{hash: []byte(redisdlock.AcquireScriptHashForTest())}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: ld.dial, MaxRetries: 3})
		c, err := redisdlock.New(ctx, rdb, nil)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("lost-reply-%v", wait)
		ld.armed.Store(true)
		lock := c.TryLock
		if wait {
			lock = c.Lock
		}
		l, err := lock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("wait=%v: acquire after a lost reply: %v", wait, err)
		}
		if ld.hits.Load() != 1 {
			t.Fatalf("wait=%v: injected %d lost replies, want 1", wait, ld.hits.Load())
		}
		info, err := other.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders) == 0 || info.Holders[0].Token != l.Token() || len(info.Waiters) != 0 {
			t.Fatalf("wait=%v: server state %+v, want our grant (token %d) and no waiter", wait, info, l.Token())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		l2, err := other.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("wait=%v: key not free after Unlock: %v", wait, err)
		}
		_ = l2.Unlock(ctx)
		_ = c.Close()
		_ = rdb.Close()
	}
}

// When the retries fail too, TryLock reports the error and removes whatever
// its lost request left on the server.
func TestAcquire_failedAttemptLeavesNothing(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	other := newTestClient(t, ctx, srv.Addr(), nil)
	ld := &lossyDialer{hash: []byte(redisdlock.AcquireScriptHashForTest())}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: ld.dial, MaxRetries: -1}) // no retry
	defer rdb.Close()
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ld.armed.Store(true)
	if _, err := c.TryLock(ctx, "failed-attempt", dlock.WithTTL(time.Minute)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock with its reply lost and no retry: err = %v, want ErrUnavailable", err)
	}
	l, err := other.TryLock(ctx, "failed-attempt")
	if err != nil {
		t.Fatalf("the failed attempt left the key held: %v", err)
	}
	_ = l.Unlock(ctx)
}

// A waiter cut off when the key is handed to it loses that grant (it cannot
// renew what it does not know it has); the key expires and passes on. When
// the waiter's network comes back, the old hand-off notice arrives late:
// Lock must not return that lost grant, but keep waiting and return a new
// one (the fault-injection suite's paused-waiter scenario makes it too).
func TestLock_lateNoticeOfLostGrantIgnored(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	ttl := dlock.WithTTL(time.Second)
	holder := newTestClient(t, ctx, srv.Addr(), nil)
	next := newTestClient(t, ctx, srv.Addr(), nil)
	link := dlocktest.NewProxy(t, srv.Addr())
	slow := newTestClient(t, ctx, link.Addr(), &redisdlock.Options{WaiterTimeout: time.Hour, PollInterval: 30 * time.Minute})

	lh, err := holder.Lock(ctx, "late", ttl)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *dlock.Lease
		err error
	}
	slowGot, nextGot := make(chan result, 1), make(chan result, 1)
	go func() { l, err := slow.Lock(ctx, "late", ttl); slowGot <- result{l, err} }()
	waitWaiters(t, ctx, holder, "late", 1)
	go func() { l, err := next.Lock(ctx, "late", ttl); nextGot <- result{l, err} }()
	waitWaiters(t, ctx, holder, "late", 2)

	link.Blackhole()
	if err := lh.Unlock(ctx); err != nil { // hands the key to slow, which never hears of it
		t.Fatal(err)
	}
	var ln *dlock.Lease
	select {
	case r := <-nextGot: // slow's grant expired and passed on
		if r.err != nil {
			t.Fatal(r.err)
		}
		ln = r.l
	case <-ctx.Done():
		t.Fatal("the next waiter never got the key of a waiter that was cut off (watchdog)")
	}
	link.Restore()
	if err := ln.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-slowGot:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.l.Token() <= ln.Token() {
			t.Fatalf("Lock returned the lost grant (token %d) announced before the next holder's (token %d)", r.l.Token(), ln.Token())
		}
		_ = r.l.Unlock(ctx)
	case <-ctx.Done():
		t.Fatal("the cut-off waiter never got the key after the next holder released it (watchdog)")
	}
}

// The scripts cut the times they store from TIME's reply rather than
// formatting numbers: the holder's and a waiter's Since are the server's
// time of the grant and of the queueing (this server runs on this
// machine's clock), and the token is that grant's time in µs.
func TestInspect_sinceAndToken(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	holder := newTestClient(t, ctx, srv.Addr(), nil)
	waiter := newTestClient(t, ctx, srv.Addr(), nil)
	before := time.Now()
	lh, err := holder.Lock(ctx, "since")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lh.Unlock(ctx) }()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if l, err := waiter.Lock(wctx, "since"); err == nil {
			_ = l.Unlock(ctx)
		}
	}()
	defer func() { cancel(); <-done }()
	waitWaiters(t, ctx, holder, "since", 1)
	after := time.Now()
	info, err := holder.Inspect(ctx, "since")
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got time.Time) {
		t.Helper()
		if got.Before(before.Add(-time.Second)) || got.After(after.Add(time.Second)) {
			t.Errorf("%s = %v, want between %v and %v", what, got, before, after)
		}
	}
	near("holder since", info.Holders[0].Since)
	near("waiter since", info.Waiters[0].Since)
	near("token as time", time.UnixMicro(int64(lh.Token())))
	if ms := lh.Token() / 1000; ms != uint64(info.Holders[0].Since.UnixMilli()) {
		t.Errorf("token %d, since %d ms: not the same instant", lh.Token(), info.Holders[0].Since.UnixMilli())
	}
}
