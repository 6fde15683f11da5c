package redisdlock_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// holdDialer holds back the reply to the next request that carries hash,
// once armed, until release is closed; held is closed when the reply is
// being waited for.
type holdDialer struct {
	hash    []byte
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (d *holdDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &holdConn{Conn: c, d: d}, nil
}

type holdConn struct {
	net.Conn
	d    *holdDialer
	hold bool // the reply to the request just written is held back
}

func (c *holdConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.d.hash) && c.d.armed.CompareAndSwap(true, false) {
		c.hold = true
	}
	return c.Conn.Write(p)
}

func (c *holdConn) Read(p []byte) (int, error) {
	if c.hold {
		c.hold = false
		close(c.d.held)
		<-c.d.release
	}
	return c.Conn.Read(p)
}

// A waiter registers for its notice only once the reply that queued it has
// come (a free key needs no registration), so the notice can come first:
// a release that grants the waiter before that reply arrives. The notifier
// keeps it, and the waiter is granted by it, not by a poll (every hour
// here).
func TestAcquire_noticeBeforeQueuedReplyKept(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	opts := &redisdlock.Options{WaiterTimeout: 2 * time.Hour, PollInterval: time.Hour}
	holder := newTestClient(t, ctx, srv.Addr(), opts)
	lh, err := holder.Lock(ctx, "early", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	hd := &holdDialer{hash: []byte(redisdlock.AcquireScriptHashForTest()), held: make(chan struct{}), release: make(chan struct{})}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: hd.dial, ReadTimeout: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	d, err := redisdlock.NewDriverForTest(ctx, rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	const owner = "0123456789abcdef0123456789abcdef"
	type result struct {
		g   driver.Grant
		err error
	}
	done := make(chan result, 1)
	hd.armed.Store(true)
	go func() {
		g, err := d.Acquire(ctx, &driver.AcquireRequest{Key: "early", Owner: owner, TTL: time.Minute, Metadata: []byte("{}"),
			Wait: true, Kind: driver.KindLock, Limit: 1, Mode: driver.Exclusive})
		done <- result{g, err}
	}()
	select {
	case <-hd.held:
	case <-ctx.Done():
		t.Fatal("the acquire was never sent (watchdog)")
	}
	waitWaiters(t, ctx, holder, "early", 1) // queued on the server, its reply held
	if err := lh.Unlock(ctx); err != nil {  // grants it, and publishes the notice
		t.Fatal(err)
	}
	for !redisdlock.EarlyNoticeForTest(d, owner) {
		select {
		case <-ctx.Done():
			t.Fatal("the notice never reached the notifier (watchdog)")
		case <-time.After(time.Millisecond):
		}
	}
	close(hd.release)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		info, err := holder.Inspect(ctx, "early")
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders) != 1 || info.Holders[0].Token != r.g.Token() {
			t.Fatalf("granted token %d, holders %+v", r.g.Token(), info.Holders)
		}
		_ = r.g.Release(ctx)
	case <-ctx.Done():
		t.Fatal("the waiter missed its notice: not granted until its next poll, an hour away (watchdog)")
	}
}

// A lock's release that hands the key to a waiter, resent after its reply
// was lost, reports success: the hash's 'p' names the caller as the latest
// releaser (docs/redis.md, "Lost replies"), which the hand-off of the
// release fast path (release_lock.lua) writes as the general path does.
func TestUnlock_lostReplyOfHandOff(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	c, ld := lossyClient(t, ctx, srv.Addr(), redisdlock.ReleaseScriptHashForTest())
	l, err := c.Lock(ctx, "lost-handoff", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiter := newTestClient(t, ctx, srv.Addr(), nil)
	granted := make(chan error, 1)
	go func() {
		wl, err := waiter.Lock(ctx, "lost-handoff", dlock.WithTTL(time.Minute))
		if err == nil {
			err = wl.Unlock(ctx)
		}
		granted <- err
	}()
	waitWaiters(t, ctx, c, "lost-handoff", 1)
	ld.armed.Store(true)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock that handed the lock on, its first reply lost: %v, want nil", err)
	}
	if ld.hits.Load() != 1 {
		t.Fatalf("injected %d lost replies, want 1", ld.hits.Load())
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter was never granted (watchdog)")
	}
}

// A lock's release reads its queue only when its hash says somebody may
// have queued (the 'q' field): a key taken on the free-key path has none
// until a waiter joins, and a hash that the general path re-creates for a
// waiter served after its holder vanished has it from the start. Either
// way, the release itself grants the next waiter: right after Unlock
// returns, Inspect shows it holding, with nobody left waiting. Polls are
// an hour apart, so only the release can have granted it.
func TestUnlock_grantsWaiterBehindFreeKeyGrant(t *testing.T) {
	srv, ctx, admin, opts := costRig(t)
	const key = "flag"
	lockIn := func(c *dlock.Client) <-chan *dlock.Lease {
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := c.Lock(ctx, key, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		return got
	}
	leaseOf := func(ch <-chan *dlock.Lease) *dlock.Lease {
		t.Helper()
		select {
		case l := <-ch:
			if l == nil {
				t.FailNow()
			}
			return l
		case <-ctx.Done():
			t.Fatal("Lock never returned (watchdog)")
			return nil
		}
	}
	heldByNextWaiter := func(after string) {
		t.Helper()
		info, err := admin.Exists(ctx, redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)+":q").Result()
		if err != nil {
			t.Fatal(err)
		}
		li, err := newTestClient(t, ctx, srv.Addr(), opts).Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(li.Holders) != 1 || len(li.Waiters) != 0 || info != 0 {
			t.Fatalf("after %s: %d holders, %d waiters, queue key exists %v; want the next waiter holding, nobody waiting",
				after, len(li.Holders), len(li.Waiters), info == 1)
		}
	}

	holder := newTestClient(t, ctx, srv.Addr(), opts)
	lh, err := holder.Lock(ctx, key, dlock.WithTTL(time.Minute)) // the free-key path: no 'q'
	if err != nil {
		t.Fatal(err)
	}
	a, b := newTestClient(t, ctx, srv.Addr(), opts), newTestClient(t, ctx, srv.Addr(), opts)
	gotA := lockIn(a)
	waitWaiters(t, ctx, holder, key, 1)
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	heldByNextWaiter("the free-key holder's release")
	la := leaseOf(gotA)

	// a's hash vanishes behind its back with b queued; c's TryLock then
	// serves b on the general path, which re-creates the hash.
	gotB := lockIn(b)
	waitWaiters(t, ctx, holder, key, 1)
	c := newTestClient(t, ctx, srv.Addr(), opts)
	gotC := lockIn(c)
	waitWaiters(t, ctx, holder, key, 2)
	if err := admin.Del(ctx, redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock with b served in its place: %v, want ErrLocked", err)
	}
	lb := leaseOf(gotB)
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	heldByNextWaiter("the release of a waiter served on the general path")
	if err := leaseOf(gotC).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = la.Unlock(ctx) // lost with its hash
}
