package lease

import (
	"context"
	"testing"
	"time"
)

func TestHalfLeft(t *testing.T) {
	for _, c := range []struct {
		name        string
		left, floor time.Duration
		want        time.Duration
		wantOK      bool
	}{
		{"half of what is left", 10 * time.Second, 200 * time.Millisecond, 5 * time.Second, true},
		{"no floor", 3 * time.Millisecond, 0, 1500 * time.Microsecond, true},
		{"half exactly the floor", 400 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond, true},
		{"half just below the floor: all that is left", 399 * time.Millisecond, 200 * time.Millisecond, 0, false},
		{"tiny remainder", time.Microsecond, time.Millisecond, 0, false},
		{"tiny remainder, no floor", 3 * time.Nanosecond, 0, time.Nanosecond, true},
		{"nothing left", 0, 0, 0, true},
		{"lease already over", -time.Second, 0, 0, false},
		{"lease already over, with a floor", -time.Second, 200 * time.Millisecond, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := halfLeft(c.left, c.floor)
			if got != c.want || ok != c.wantOK {
				t.Errorf("halfLeft(%v, %v) = %v, %v; want %v, %v", c.left, c.floor, got, ok, c.want, c.wantOK)
			}
		})
	}
}

// tryTimeoutWithin checks that TryTimeout(ctx, end, floor) is half of what
// was left until want, the end that counts, read before and after the call.
func tryTimeoutWithin(t *testing.T, ctx context.Context, end, want time.Time, floor time.Duration) {
	t.Helper()
	before := time.Now()
	got, ok := TryTimeout(ctx, end, floor)
	after := time.Now()
	if !ok || got < want.Sub(after)/2 || got > want.Sub(before)/2 {
		t.Errorf("TryTimeout = %v, %v; want half of what was left until %v: %v to %v, true",
			got, ok, want.Format(time.RFC3339Nano), want.Sub(after)/2, want.Sub(before)/2)
	}
}

func TestTryTimeout_theEarlierEndCounts(t *testing.T) {
	now := time.Now()
	soon, later := now.Add(time.Minute), now.Add(time.Hour)

	t.Run("end alone", func(t *testing.T) {
		tryTimeoutWithin(t, context.Background(), soon, soon, time.Second)
	})
	t.Run("ctx's deadline alone", func(t *testing.T) {
		ctx, cancel := context.WithDeadline(context.Background(), soon)
		defer cancel()
		tryTimeoutWithin(t, ctx, time.Time{}, soon, time.Second)
	})
	t.Run("ctx's deadline earlier", func(t *testing.T) {
		ctx, cancel := context.WithDeadline(context.Background(), soon)
		defer cancel()
		tryTimeoutWithin(t, ctx, later, soon, time.Second)
	})
	t.Run("end earlier", func(t *testing.T) {
		ctx, cancel := context.WithDeadline(context.Background(), later)
		defer cancel()
		tryTimeoutWithin(t, ctx, soon, soon, time.Second)
	})
}

func TestTryTimeout_allThatIsLeft(t *testing.T) {
	over, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, c := range []struct {
		name  string
		ctx   context.Context
		end   time.Time
		floor time.Duration
	}{
		{"no end and no deadline", context.Background(), time.Time{}, 0},
		{"lease already over", context.Background(), time.Now().Add(-time.Second), 0},
		{"ctx's deadline over, end ahead", over, time.Now().Add(time.Hour), 0},
		{"half below the floor", context.Background(), time.Now().Add(time.Minute), time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, ok := TryTimeout(c.ctx, c.end, c.floor); ok || got != 0 {
				t.Errorf("TryTimeout = %v, %v; want 0, false (no deadline of the try's own)", got, ok)
			}
		})
	}
}
