package memdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

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
	clock := memdlock.NewClock(time.Unix(0, 0))
	a, ha, err := memdlock.New(&memdlock.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _, err := ha.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	la, err := a.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	ha.Freeze()
	clock.Advance(3 * dlock.DefaultTTL)
	wait(t, la.Done(), "frozen lease lost")
	if err := la.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("frozen lease Err = %v, want ErrLeaseLost", err)
	}
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
	clock := memdlock.NewClock(time.Unix(0, 0))
	c, h, err := memdlock.New(&memdlock.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
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
	c, h, err := memdlock.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if h.LoseLease("k") {
		t.Fatal("LoseLease of a key not held = true")
	}
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !h.LoseLease("k") {
		t.Fatal("LoseLease of a held key = false")
	}
	wait(t, l.Done(), "lost lease")
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", err)
	}
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
	l, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	token := l.Token()
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
	b, err := dlock.Open(ctx, "mem://forgotten")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
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
	a, _, err := memdlock.New(&memdlock.Options{Space: "one"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, "mem://two")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := dlock.Open(ctx, "mem://one")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
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
	a, _, err := memdlock.New(&memdlock.Options{Space: "clocked", Clock: memdlock.NewClock(time.Unix(0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, _, err := memdlock.New(&memdlock.Options{Space: "clocked", Clock: memdlock.NewClock(time.Unix(0, 0))}); !errors.Is(err, memdlock.ErrClockDiffers) {
		t.Fatalf("New with another clock = %v, want ErrClockDiffers", err)
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
	clock := memdlock.NewClock(time.Unix(0, 0))
	a, ha, err := memdlock.New(&memdlock.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _, err := ha.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	la, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Lock(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	ha.Disconnect()
	clock.Advance(dlock.DefaultTTL)
	wait(t, la.Done(), "cut-off lease lost")
	if err := la.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("cut-off lease Err = %v, want ErrLeaseLost", err)
	}
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
	clock := memdlock.NewClock(time.Unix(0, 0))
	holder, ha, err := memdlock.New(&memdlock.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	a, hcut, err := ha.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, _, err := ha.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	l0, err := holder.Lock(ctx, "k", note("holder"))
	if err != nil {
		t.Fatal(err)
	}
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
	if err := l0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rc := <-gotC
	if rc.err != nil {
		t.Fatalf("c's Lock: %v", rc.err)
	}
	hcut.Reconnect() // a's Lock goes on: it queues again, behind c
	eventually(t, "a queued again", func() bool { _, w := queue(t, holder, "k"); return len(w) == 1 && w[0] == "a" })
	if err := rc.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
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
	if err := ra.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestHandle_Disconnect_callsWaitForReconnect(t *testing.T) {
	ctx := context.Background()
	a, ha, err := memdlock.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _, err := ha.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
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
	a, h, err := memdlock.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _, err := h.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	la, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
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
		wait(t, l.Done(), "lease lost at the restart")
		if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Fatalf("Err of %q after Restart = %v, want ErrLeaseLost", l.Key(), err)
		}
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
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
