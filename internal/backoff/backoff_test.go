package backoff

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

const ms = time.Millisecond

func TestPolicy_Nominal(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"first", Policy{Initial: 5 * ms, Max: time.Second}, 0, 5 * ms},
		{"doubles", Policy{Initial: 5 * ms, Max: time.Second}, 1, 10 * ms},
		{"doubles again", Policy{Initial: 5 * ms, Max: time.Second}, 7, 640 * ms},
		{"capped", Policy{Initial: 5 * ms, Max: time.Second}, 8, time.Second},
		{"stays capped", Policy{Initial: 5 * ms, Max: time.Second}, math.MaxInt, time.Second},
		{"cap below first", Policy{Initial: 5 * ms, Max: 2 * ms}, 0, 2 * ms},
		{"cap not a power of two of first", Policy{Initial: 5 * ms, Max: 160 * ms}, 5, 160 * ms},
		{"no overflow under a huge cap", Policy{Initial: time.Second, Max: math.MaxInt64}, 1000, math.MaxInt64},
		{"zero policy", Policy{}, 3, 0},
		{"no first delay", Policy{Max: time.Second}, 3, 0},
		{"no cap", Policy{Initial: 5 * ms}, 0, 0},
		{"negative first delay", Policy{Initial: -ms, Max: time.Second}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Nominal(tt.n); got != tt.want {
				t.Errorf("%+v.Nominal(%d) = %v, want %v", tt.p, tt.n, got, tt.want)
			}
		})
	}
}

// lowest and highest stand in for rand.N at the ends of its range.
func lowest(time.Duration) time.Duration    { return 0 }
func highest(n time.Duration) time.Duration { return n - 1 }

func TestPolicy_delay_jitterRange(t *testing.T) {
	tests := []struct {
		name   string
		p      Policy
		n      int
		lo, hi time.Duration
	}{
		{"equal: half to all", Policy{Initial: 10 * ms, Max: time.Second, Jitter: Equal}, 1, 10 * ms, 20 * ms},
		{"equal: odd nominal", Policy{Initial: 5, Max: time.Second, Jitter: Equal}, 0, 2, 5},
		{"equal: capped", Policy{Initial: 10 * ms, Max: 15 * ms, Jitter: Equal}, 3, 7500 * time.Microsecond, 15 * ms},
		{"full: nothing to all", Policy{Initial: 10 * ms, Max: time.Second, Jitter: Full}, 2, 0, 40 * ms},
		{"zero nominal, no draw", Policy{Jitter: Full}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.delay(tt.n, lowest); got != tt.lo {
				t.Errorf("lowest delay(%d) = %v, want %v", tt.n, got, tt.lo)
			}
			if got := tt.p.delay(tt.n, highest); got != tt.hi {
				t.Errorf("highest delay(%d) = %v, want %v", tt.n, got, tt.hi)
			}
		})
	}
}

// TestPolicy_Delay_drawsWithinRange: the real random draws stay within the
// jitter's range, and do spread.
func TestPolicy_Delay_drawsWithinRange(t *testing.T) {
	for _, j := range []Jitter{Equal, Full} {
		p := Policy{Initial: time.Second, Max: time.Second, Jitter: j}
		lo := p.delay(0, lowest)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := p.Delay(0)
			if d < lo || d > time.Second {
				t.Fatalf("jitter %d: Delay(0) = %v, want within [%v, %v]", j, d, lo, time.Second)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Errorf("jitter %d: 200 draws over %v gave one delay: no jitter", j, time.Second-lo)
		}
	}
}

func TestBackoff_Next_doublesToCapAndResets(t *testing.T) {
	b := New(Policy{Initial: 5 * ms, Max: 35 * ms})
	b.randN = highest
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 35 * ms, 35 * ms, 35 * ms}
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Fatalf("Next #%d = %v, want %v", i, got, w)
		}
	}
	b.Reset()
	if got := b.Next(); got != 5*ms {
		t.Fatalf("Next after Reset = %v, want the first delay, 5ms", got)
	}
	if got := b.Next(); got != 10*ms {
		t.Fatalf("second Next after Reset = %v, want 10ms", got)
	}
}

// TestBackoff_Wait_waitsEachDelay: in a synctest bubble, whose clock moves
// only when every goroutine waits, Wait takes exactly the drawn delay.
func TestBackoff_Wait_waitsEachDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Policy{Initial: 10 * ms, Max: time.Second})
		b.randN = lowest
		for i, want := range []time.Duration{5 * ms, 10 * ms, 20 * ms} {
			start := time.Now()
			if err := b.Wait(t.Context()); err != nil {
				t.Fatalf("Wait #%d = %v, want nil", i, err)
			}
			if got := time.Since(start); got != want {
				t.Fatalf("Wait #%d took %v, want %v", i, got, want)
			}
		}
	})
}

func TestSleep(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name     string
		ctx      func(t *testing.T) context.Context
		d        time.Duration
		want     error
		duration time.Duration
	}{
		{"waits d", func(t *testing.T) context.Context { return t.Context() }, 3 * time.Second, nil, 3 * time.Second},
		{"no wait", func(t *testing.T) context.Context { return t.Context() }, 0, nil, 0},
		{"negative: no wait", func(t *testing.T) context.Context { return t.Context() }, -time.Second, nil, 0},
		{"ended ctx, no wait", func(*testing.T) context.Context { return cancelled }, 0, context.Canceled, 0},
		{"ended ctx", func(*testing.T) context.Context { return cancelled }, time.Hour, context.Canceled, 0},
		{"deadline first", func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			t.Cleanup(cancel)
			return ctx
		}, time.Hour, context.DeadlineExceeded, 2 * time.Second},
		{"cancelled while waiting", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(time.Second, cancel)
			return ctx
		}, time.Hour, context.Canceled, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := tt.ctx(t)
				start := time.Now()
				err := Sleep(ctx, tt.d)
				if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
					t.Fatalf("Sleep(%v) = %v, want %v", tt.d, err, tt.want)
				}
				if got := time.Since(start); got != tt.duration {
					t.Fatalf("Sleep(%v) took %v, want %v", tt.d, got, tt.duration)
				}
			})
		})
	}
}
