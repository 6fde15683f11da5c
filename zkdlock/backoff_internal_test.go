package zkdlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestBackoff_pauseWithinBounds: a retry's pause doubles from 5 ms to
// 160 ms, is never above the call's limit, and is at least half of its
// nominal length. synctest's clock moves only when every goroutine of the
// bubble waits, so the measured pause is exactly the pause drawn.
func TestBackoff_pauseWithinBounds(t *testing.T) {
	tests := []struct {
		attempt int
		limit   time.Duration
		lo, hi  time.Duration
	}{
		{0, time.Second, 2500 * time.Microsecond, 5 * time.Millisecond},
		{2, time.Second, 10 * time.Millisecond, 20 * time.Millisecond},
		{5, time.Second, 80 * time.Millisecond, 160 * time.Millisecond},
		{1000, time.Second, 80 * time.Millisecond, 160 * time.Millisecond},
		{1000, 30 * time.Millisecond, 15 * time.Millisecond, 30 * time.Millisecond},
		{0, 0, 0, 0},
	}
	synctest.Test(t, func(t *testing.T) {
		for _, tt := range tests {
			start := time.Now()
			if err := backoff(t.Context(), tt.attempt, tt.limit); err != nil {
				t.Fatalf("backoff(%d, %v) = %v, want nil", tt.attempt, tt.limit, err)
			}
			if d := time.Since(start); d < tt.lo || d > tt.hi {
				t.Errorf("backoff(%d, %v) paused %v, want within [%v, %v]", tt.attempt, tt.limit, d, tt.lo, tt.hi)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Millisecond, cancel)
		if err := backoff(ctx, 1000, time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("backoff with ctx cancelled while pausing = %v, want context.Canceled", err)
		}
	})
}
