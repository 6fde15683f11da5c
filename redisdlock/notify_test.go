package redisdlock_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// muteDialer can make the subscription connection deaf: it stays open and
// takes writes, but nothing the server sends arrives — a half-open
// connection, as after a partition that the kernel has not noticed.
type muteDialer struct {
	mu    sync.Mutex
	conns []*muteConn
}

func (d *muteDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	mc := &muteConn{Conn: c}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conns = append(d.conns, mc)
	return mc, nil
}

// muteSubscription mutes the connections subscribed so far; one dialed
// later (the notifier's replacement) works.
func (d *muteDialer) muteSubscription() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		if c.pubsub.Load() {
			c.muted.Store(true)
		}
	}
}

type muteConn struct {
	net.Conn
	pubsub atomic.Bool // SUBSCRIBE was sent on it
	muted  atomic.Bool
}

func (c *muteConn) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("subscribe")) {
		c.pubsub.Store(true)
	}
	return c.Conn.Write(b)
}

// Read drops whatever arrives once muted, and returns only errors (the read
// deadline passing, the connection closed).
func (c *muteConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.muted.Load() {
			return n, err
		}
	}
}

// A subscription that goes silent (its notices and the reply to the
// notifier's ping never arrive) is replaced within two health-check
// intervals, and the waiter whose notice was lost polls and finds its grant
// then — not at its next poll, an hour away, nor at TTL/3.
func TestNotifier_silentSubscriptionReplaced(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	opts := &redisdlock.Options{WaiterTimeout: 2 * time.Hour, PollInterval: time.Hour}
	holder := newTestClient(t, ctx, srv.Addr(), opts)
	md := &muteDialer{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: md.dial, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	waiter, err := redisdlock.New(ctx, rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })

	ttl := dlock.WithTTL(time.Minute) // polls at TTL/3 = 20 s at the earliest
	lh, err := holder.Lock(ctx, "silent", ttl)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, "silent", ttl)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitWaiters(t, ctx, holder, "silent", 1)
	md.muteSubscription()
	start := time.Now()
	if err := lh.Unlock(ctx); err != nil { // the notice goes unheard
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("the waiter got its grant after %v: by a poll, not by replacing the silent subscription", d)
		}
	case <-ctx.Done():
		t.Fatal("waiter never learned it was granted the key (watchdog)")
	}
}
