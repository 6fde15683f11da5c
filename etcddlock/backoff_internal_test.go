package etcddlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestBackoff_zeroValueDoublesAndRestarts: a zero backoff's first wait is
// 5 ms jittered down to no less than half, each next one doubles to 1 s,
// and a fresh zero value starts over. synctest's clock moves only when
// every goroutine of the bubble waits, so a measured wait is exactly the
// wait drawn.
func TestBackoff_zeroValueDoublesAndRestarts(t *testing.T) {
	const ms = time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		var b backoff
		wait := func(i int, lo, hi time.Duration) {
			t.Helper()
			start := time.Now()
			if err := b.wait(t.Context()); err != nil {
				t.Fatalf("wait #%d = %v, want nil", i, err)
			}
			if d := time.Since(start); d < lo || d > hi {
				t.Fatalf("wait #%d took %v, want within [%v, %v]", i, d, lo, hi)
			}
		}
		for i, hi := range []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second} {
			wait(i, hi/2, hi)
		}
		b = backoff{}
		wait(0, 5*ms/2, 5*ms)

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(ms, cancel)
		if err := b.wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait with ctx cancelled while waiting = %v, want context.Canceled", err)
		}
	})
}
