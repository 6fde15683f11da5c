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
