package memdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

// newClient returns a client of a lock space of its own (opts as for
// memdlock.New) and its Handle; the client is closed when the test ends.
func newClient(t *testing.T, opts *memdlock.Options) (*dlock.Client, *memdlock.Handle) {
	t.Helper()
	c, h, err := memdlock.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, h
}

// newClocked is newClient for a space on a fake clock, which it returns
// too, set at the Unix epoch.
func newClocked(t *testing.T) (*dlock.Client, *memdlock.Handle, *memdlock.Clock) {
	t.Helper()
	clock := memdlock.NewClock(time.Unix(0, 0))
	c, h := newClient(t, &memdlock.Options{Clock: clock})
	return c, h, clock
}

// newPeer returns another client of h's space and its own Handle; the
// client is closed when the test ends.
func newPeer(t *testing.T, h *memdlock.Handle) (*dlock.Client, *memdlock.Handle) {
	t.Helper()
	c, hc, err := h.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, hc
}

// open returns a client opened by url, closed when the test ends.
func open(t *testing.T, url string) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lock takes key with c, failing the test if it cannot.
func lock(t *testing.T, c *dlock.Client, key string, opts ...dlock.LockOption) *dlock.Lease {
	t.Helper()
	l, err := c.Lock(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("Lock(%q): %v", key, err)
	}
	return l
}

// unlock releases l, failing the test if it cannot.
func unlock(t *testing.T, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Key(), err)
	}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}

func TestClock_Advance_endsFrozenLeasesOnly(t *testing.T) {
	ctx := context.Background()
	a, ha, clock := newClocked(t)
	b, _ := newPeer(t, ha)
	la, lb := lock(t, a, "a"), lock(t, b, "b")
	ha.Freeze()
	clock.Advance(3 * dlock.DefaultTTL)
	waitLost(t, la, "frozen lease lost")
	if err := lb.Err(); err != nil {
		t.Fatalf("live lease Err after Advance = %v, want nil", err)
	}
	info, err := b.Inspect(ctx, "b")
	if err != nil || len(info.Holders) != 1 {
		t.Fatalf("Inspect(b) = %+v, %v; want one holder", info, err)
	}
	// The frozen client's key is free for others.
	if _, err := b.TryLock(ctx, "a"); err != nil {
		t.Fatalf("TryLock of the expired key: %v", err)
	}
}

func TestClock_Advance_withoutFreezeKeepsLeases(t *testing.T) {
	ctx := context.Background()
	c, h, clock := newClocked(t)
	l := lock(t, c, "k")
	clock.Advance(time.Hour)
	if err := l.Err(); err != nil {
		t.Fatalf("lease Err after Advance = %v", err)
	}
	h.Freeze()
	h.Thaw()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after Advance: %v", err)
	}
}

func TestHandle_LoseLease(t *testing.T) {
	ctx := context.Background()
	c, h := newClient(t, nil)
	if h.LoseLease("k") {
		t.Fatal("LoseLease of a key not held = true")
	}
	l := lock(t, c, "k")
	if !h.LoseLease("k") {
		t.Fatal("LoseLease of a held key = false")
	}
	waitLost(t, l, "lost lease")
	l2, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock after LoseLease: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d: not increasing", l2.Token(), l.Token())
	}
}

func TestOpen_namedSpaceForgottenWhenUnused(t *testing.T) {
	ctx := context.Background()
	before := memdlock.NamedSpacesForTest()
	a, err := dlock.Open(ctx, "mem://forgotten")
	if err != nil {
		t.Fatal(err)
	}
	token := lock(t, a, "k").Token()
	if got := memdlock.NamedSpacesForTest(); got != before+1 {
		t.Fatalf("named spaces while used = %d, want %d", got, before+1)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := memdlock.NamedSpacesForTest(); got != before {
		t.Fatalf("named spaces after the last Close = %d, want %d", got, before)
	}
	// Opened again, the space is new, and its tokens still go up.
	b := open(t, "mem://forgotten")
	l2, err := b.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock in the reopened space: %v", err)
	}
	if l2.Token() <= token {
		t.Fatalf("token %d after %d in an earlier life of the space", l2.Token(), token)
	}
}

func TestOpen_namesSeparateSpaces(t *testing.T) {
	ctx := context.Background()
	a, _ := newClient(t, &memdlock.Options{Space: "one"})
	b, c := open(t, "mem://two"), open(t, "mem://one")
	l := lock(t, a, "k")
	defer l.Unlock(ctx)
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock in the same space = %v, want ErrLocked", err)
	}
	l2, err := b.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock in another space: %v", err)
	}
	_ = l2.Unlock(ctx)
}

func TestOpen_badURL(t *testing.T) {
	for _, u := range []string{"mem://x/path", "mem://x?ttl=1s", "mem://u:p@x", "mem://x:1"} {
		if _, err := dlock.Open(context.Background(), u); !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", u, err)
		}
	}
}

func TestNew_clockDiffers(t *testing.T) {
	newClient(t, &memdlock.Options{Space: "clocked", Clock: memdlock.NewClock(time.Unix(0, 0))})
	if _, _, err := memdlock.New(&memdlock.Options{Space: "clocked", Clock: memdlock.NewClock(time.Unix(0, 0))}); !errors.Is(err, memdlock.ErrClockDiffers) {
		t.Fatalf("New with another clock = %v, want ErrClockDiffers", err)
	}
}

// waitLost waits until l is lost, as what says, and checks that its Err
// says so.
func waitLost(t *testing.T, l *dlock.Lease, what string) {
	t.Helper()
	wait(t, l.Done(), what)
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("%s: Err of %q = %v, want ErrLeaseLost", what, l.Key(), err)
	}
}

// eventually polls cond until it holds, failing the test after 10 s: for
// the queue, which a test can only observe from outside.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	limit := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-limit:
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// queue returns the notes of key's holders and waiters.
func queue(t *testing.T, c *dlock.Client, key string) (holders, waiters []string) {
	t.Helper()
	info, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	for _, h := range info.Holders {
		holders = append(holders, h.Metadata.Note)
	}
	for _, w := range info.Waiters {
		waiters = append(waiters, w.Metadata.Note)
	}
	return holders, waiters
}

func note(n string) dlock.LockOption { return dlock.WithMetadata(dlock.Metadata{Note: n}) }

func TestHandle_Disconnect_leaseExpiresOnAdvance(t *testing.T) {
	ctx := context.Background()
	a, ha, clock := newClocked(t)
	b, _ := newPeer(t, ha)
	la, lb := lock(t, a, "k"), lock(t, b, "other")
	ha.Disconnect()
	clock.Advance(dlock.DefaultTTL)
	waitLost(t, la, "cut-off lease lost")
	if err := lb.Err(); err != nil {
		t.Fatalf("connected client's lease Err after Advance = %v, want nil", err)
	}
	next, err := b.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock of the cut-off client's key: %v", err)
	}
	if next.Token() <= la.Token() {
		t.Fatalf("token %d after %d: not increasing", next.Token(), la.Token())
	}
	ha.Reconnect()
	if err := la.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired lease once back = %v, want ErrNotHeld", err)
	}
	if h, _ := queue(t, b, "k"); len(h) != 1 {
		t.Fatalf("holders after the stale Unlock = %q, want b's only", h)
	}
}

func TestHandle_Disconnect_waiterExpiresAndQueuesAgain(t *testing.T) {
	ctx := context.Background()
	holder, ha, clock := newClocked(t)
	a, hcut := newPeer(t, ha)
	c, _ := newPeer(t, ha)

	l0 := lock(t, holder, "k", note("holder"))
	type result struct {
		l   *dlock.Lease
		err error
	}
	gotA, gotC := make(chan result, 1), make(chan result, 1)
	go func() { l, err := a.Lock(ctx, "k", note("a")); gotA <- result{l, err} }()
	eventually(t, "a queued", func() bool { _, w := queue(t, holder, "k"); return len(w) == 1 })
	hcut.Disconnect()
	go func() { l, err := c.Lock(ctx, "k", note("c")); gotC <- result{l, err} }()
	eventually(t, "c queued", func() bool { _, w := queue(t, holder, "k"); return len(w) == 2 })

	clock.Advance(dlock.DefaultTTL) // the space forgets the cut-off waiter
	if _, w := queue(t, holder, "k"); len(w) != 1 || w[0] != "c" {
		t.Fatalf("waiters after a TTL cut off = %q, want [c]", w)
	}
	unlock(t, l0)
	rc := <-gotC
	if rc.err != nil {
		t.Fatalf("c's Lock: %v", rc.err)
	}
	hcut.Reconnect() // a's Lock goes on: it queues again, behind c
	eventually(t, "a queued again", func() bool { _, w := queue(t, holder, "k"); return len(w) == 1 && w[0] == "a" })
	unlock(t, rc.l)
	var ra result
	select {
	case ra = <-gotA:
	case <-time.After(10 * time.Second):
		t.Fatal("a not granted within 10s of c's release")
	}
	if ra.err != nil {
		t.Fatalf("a's Lock: %v", ra.err)
	}
	if ra.l.Token() <= rc.l.Token() {
		t.Fatalf("a's token %d after c's %d: not increasing", ra.l.Token(), rc.l.Token())
	}
	unlock(t, ra.l)
}

func TestHandle_Disconnect_callsWaitForReconnect(t *testing.T) {
	ctx := context.Background()
	a, ha := newClient(t, nil)
	b, _ := newPeer(t, ha)
	ha.Disconnect()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := a.Inspect(short, "k"); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Inspect of a cut-off client = %v, want ErrUnavailable", err)
	}
	if _, err := a.TryLock(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock of a cut-off client = %v, want its ctx's DeadlineExceeded", err)
	}
	if h, w := queue(t, b, "k"); len(h)+len(w) != 0 {
		t.Fatalf("a cut-off client's TryLock reached the space: holders %q, waiters %q", h, w)
	}
	got := make(chan error, 1)
	go func() {
		l, err := a.TryLock(ctx, "k")
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	ha.Reconnect()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("TryLock once reconnected: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("TryLock still waits 10s after Reconnect")
	}
}

func TestHandle_Restart(t *testing.T) {
	ctx := context.Background()
	a, h := newClient(t, nil)
	b, _ := newPeer(t, h)
	la := lock(t, a, "k")
	sem, err := a.Semaphore("s", 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := b.Lock(ctx, "k", note("b"))
		if err != nil {
			t.Errorf("b's Lock: %v", err)
		}
		got <- l
	}()
	eventually(t, "b queued", func() bool { _, w := queue(t, a, "k"); return len(w) == 1 })
	h.Restart()
	for _, l := range []*dlock.Lease{la, sem} {
		waitLost(t, l, "lease lost at the restart")
	}
	// The waiter queued again, on the empty space: it holds now.
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	if lb.Token() <= sem.Token() {
		t.Fatalf("token after the restart %d, before %d: not increasing", lb.Token(), sem.Token())
	}
	if hs, _ := queue(t, a, "k"); len(hs) != 1 || hs[0] != "b" {
		t.Fatalf("holders of k after Restart = %q, want [b]", hs)
	}
	if info, err := a.Inspect(ctx, "s"); err != nil || len(info.Holders) != 0 {
		t.Fatalf("Inspect(s) after Restart = %+v, %v; want nobody", info, err)
	}
	unlock(t, lb)
}
