package errtext

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
)

// Backend is what RecordCommon needs of a backend's test.
type Backend struct {
	// Open returns a new client of the test server with opts; the test
	// closes it when it ends.
	Open func(ctx context.Context, t *testing.T, opts ...dlock.Option) (*dlock.Client, error)
	// DeleteKey removes key's state from the server behind its holder's
	// back (the harness's dlocktest.KeyDeleter).
	DeleteKey func(ctx context.Context, key string) error
	// NewFaultyClient, if not nil, returns a client whose connection the
	// Link can cut (the harness's dlocktest.FaultyClientMaker).
	NewFaultyClient func(ctx context.Context, t *testing.T) (*dlock.Client, dlocktest.Link, error)
	// TTL is a lease length long enough that a renewal is certain to run
	// before the local deadline on a loaded machine, so that a deleted key
	// is found by a renewal, not by the deadline. Zero: do not pass WithTTL
	// (on ZooKeeper the lease length is the session timeout).
	TTL time.Duration
}

// URLBackend returns a Backend whose clients open url(addr), addr the
// test server's address: Open's, and NewFaultyClient's through a
// dlocktest.Proxy in front of the server, whose address url is given
// instead. Each client is closed when the test that opened it ends. The
// caller sets DeleteKey and TTL.
func URLBackend(addr string, url func(addr string) string) Backend {
	open := func(ctx context.Context, t *testing.T, addr string, opts ...dlock.Option) (*dlock.Client, error) {
		c, err := dlock.Open(ctx, url(addr), opts...)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return c, err
	}
	return Backend{
		Open: func(ctx context.Context, t *testing.T, opts ...dlock.Option) (*dlock.Client, error) {
			return open(ctx, t, addr, opts...)
		},
		NewFaultyClient: func(ctx context.Context, t *testing.T) (*dlock.Client, dlocktest.Link, error) {
			p := dlocktest.NewProxy(t, addr)
			c, err := open(ctx, t, p.Addr())
			return c, p, err
		},
	}
}

// RecordCommon provokes the errors every backend shows in the same
// situations: a held key, a double Unlock, a lease lost, bad keys and
// options, a closed client, a cancelled wait. Keys are named "k", "k2"…
// so that messages are the same on every run.
func RecordCommon(ctx context.Context, t *testing.T, r *Recorder, b Backend) {
	t.Helper()
	open := func(opts ...dlock.Option) *dlock.Client {
		t.Helper()
		c, err := b.Open(ctx, t, opts...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return c
	}
	a, other := open(), open()
	var ttl []dlock.LockOption
	if b.TTL != 0 {
		ttl = append(ttl, dlock.WithTTL(b.TTL))
	}

	// Held: TryLock and Inspect of a held key.
	held, err := a.TryLock(ctx, "k", ttl...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.TryLock(ctx, "k", ttl...)
	r.Record("trylock-held", err, dlock.ErrLocked)

	// Unlock twice.
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r.Record("lease-err-after-unlock", held.Err(), dlock.ErrReleased)
	r.Record("unlock-twice", held.Unlock(ctx), dlock.ErrNotHeld)

	// A lease lost: its key deleted on the server.
	lost, err := a.Lock(ctx, "k2", ttl...)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteKey(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	waitDone(ctx, t, lost)
	r.Record("lease-lost-key-deleted", lost.Err(), dlock.ErrLeaseLost)
	r.Record("unlock-after-key-deleted", lost.Unlock(ctx), dlock.ErrNotHeld)

	// A lease lost: cut off from the server until its deadline passed.
	if b.NewFaultyClient != nil {
		f, link, err := b.NewFaultyClient(ctx, t)
		if err != nil {
			t.Fatal(err)
		}
		l, err := f.Lock(ctx, "k3", ttl...)
		if err != nil {
			t.Fatal(err)
		}
		link.Blackhole()
		waitDone(ctx, t, l)
		r.Record("lease-lost-cut-off", l.Err(), dlock.ErrLeaseLost)
		link.Restore()
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r.Record("unlock-after-cut-off", l.Unlock(uctx), dlock.ErrNotHeld)
		cancel()
	}

	// Bad keys and prefixes.
	for _, c := range []struct{ name, key string }{
		{"lock-key-empty", ""},
		{"lock-key-too-long", strings.Repeat("k", dlock.MaxKeyLen+1)},
		{"lock-key-control-char", "line\nbreak"},
		{"lock-key-not-utf8", "\xff\xfe"},
	} {
		_, err := a.Lock(ctx, c.key)
		r.Record(c.name, err, dlock.ErrInvalidKey)
	}
	_, err = a.TryLock(ctx, "nul\x00")
	r.Record("trylock-key-nul", err, dlock.ErrInvalidKey)
	_, err = a.Inspect(ctx, "")
	r.Record("inspect-key-empty", err, dlock.ErrInvalidKey)
	_, err = a.List(ctx, "p\x00")
	r.Record("list-prefix-nul", err, dlock.ErrInvalidKey)

	// Bad options.
	_, err = a.Lock(ctx, "k", dlock.WithTTL(time.Millisecond))
	r.Record("lock-ttl-too-short", err, dlock.ErrInvalidOption)
	_, err = a.Lock(ctx, "k", dlock.WithMetadata(dlock.Metadata{Note: strings.Repeat("n", dlock.MaxNoteLen+1)}))
	r.Record("lock-note-too-long", err, dlock.ErrInvalidOption)
	_, err = b.Open(ctx, t, dlock.WithTTL(25*time.Hour))
	r.Record("open-ttl-too-long", err, dlock.ErrInvalidOption)
	_, err = b.Open(ctx, t, dlock.WithLogger(nil))
	r.Record("open-nil-logger", err, dlock.ErrInvalidOption)

	// Waiting, then cancelled; waiting, then the client closed.
	blocker, err := a.Lock(ctx, "k4")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := other.Lock(wctx, "k4")
		errc <- err
	}()
	waitWaiters(ctx, t, a, "k4")
	cancel()
	r.Record("lock-cancelled-while-waiting", <-errc, context.Canceled)

	closing := open()
	go func() {
		_, err := closing.Lock(ctx, "k4")
		errc <- err
	}()
	waitWaiters(ctx, t, a, "k4")
	_ = closing.Close()
	r.Record("lock-closed-while-waiting", <-errc, dlock.ErrClosed)
	_ = blocker.Unlock(ctx)

	// A closed client.
	_, err = closing.Lock(ctx, "k")
	r.Record("lock-after-close", err, dlock.ErrClosed)
	_, err = closing.Inspect(ctx, "k")
	r.Record("inspect-after-close", err, dlock.ErrClosed)
}

// waitDone waits for l to end, failing the test when ctx ends first.
func waitDone(ctx context.Context, t *testing.T, l *dlock.Lease) {
	t.Helper()
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatalf("lease on %q not lost (watchdog)", l.Key())
	}
}

// waitWaiters waits until key has a waiter, polling Inspect, failing the
// test when ctx ends first.
func waitWaiters(ctx context.Context, t *testing.T, c *dlock.Client, key string) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", key, err)
		}
		if len(info.Waiters) > 0 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no waiter on %q (watchdog)", key)
		}
	}
}
