package lease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// renewCall is one call of a Waiter's renew function.
type renewCall struct {
	ctx   context.Context
	start time.Time
	reply chan error // the call returns what it receives, or ctx's error
}

// scriptedRenew returns a renew function whose calls come on the channel
// and return what the test replies.
func scriptedRenew() (func(context.Context) error, <-chan renewCall) {
	calls := make(chan renewCall, 10)
	return func(ctx context.Context) error {
		c := renewCall{ctx: ctx, start: time.Now(), reply: make(chan error, 1)}
		select {
		case calls <- c:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-c.reply:
			return err
		case <-ctx.Done():
			return fmt.Errorf("no answer: %w", ctx.Err())
		}
	}, calls
}

func nextCall(t *testing.T, calls <-chan renewCall) renewCall {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal (watchdog)")
	}
	panic("unreachable")
}

// On a fake clock: each renewal is sent a third of the validity after the
// last one was sent, not a moment earlier.
func TestWaiter_renewsAThirdOfTheValidityAfterEachRenewal(t *testing.T) {
	const validity = 300 * time.Millisecond
	clk := newFakeClock()
	renew, calls := scriptedRenew()
	w := startWaiterOn(clk, clk.Now(), validity, renew)
	defer w.Stop()
	for i := range 3 {
		// The timer runs the renewal on Advance's goroutine, where the
		// scripted renewal waits for its reply.
		early := make(chan struct{})
		go func() { clk.Advance(validity/3 - time.Millisecond); close(early) }()
		select {
		case <-early:
		case c := <-calls: // the Advance cannot end before this renewal does
			c.reply <- nil
			<-early
			t.Fatalf("renewal %d sent %v after the last one, before a third of %v", i+1, validity/3-time.Millisecond, validity)
		}
		advanced := make(chan struct{})
		go func() { clk.Advance(time.Millisecond); close(advanced) }()
		nextCall(t, calls).reply <- nil
		<-advanced
	}
	if err := w.Stop(); err != nil {
		t.Fatalf("Stop = %v, want nil", err)
	}
}

// Where the Engine gives the lease up, a Waiter sends the renewal again: a
// late success proves that the lease lived.
func TestWaiter_unansweredRenewal_sentAgainPastTheDeadline(t *testing.T) {
	const validity = 150 * time.Millisecond
	renew, calls := scriptedRenew()
	from := time.Now()
	w := StartWaiter(from, validity, renew)
	defer w.Stop()
	first := nextCall(t, calls) // left unanswered until its ctx ends
	dl, ok := first.ctx.Deadline()
	if deadline := from.Add(validity - time.Duration(float64(validity)*DriftFactor) - DriftMargin); !ok || dl.Before(deadline) {
		t.Fatalf("renewal's deadline %v (set %v), want no earlier than the lease's local deadline %v", dl, ok, deadline)
	}
	second := nextCall(t, calls)
	if !second.start.After(dl) && second.start != dl {
		t.Fatalf("second renewal at %v, before the first one's deadline %v", second.start, dl)
	}
	second.reply <- nil
	third := nextCall(t, calls)
	third.reply <- nil
	select {
	case err := <-w.Failed():
		t.Fatalf("Failed received %v, want the renewals to go on", err)
	default:
	}
	if err := w.Stop(); err != nil {
		t.Fatalf("Stop = %v, want nil", err)
	}
}

func TestWaiter_failureReported(t *testing.T) {
	gone := fmt.Errorf("%w: lease gone", driver.ErrNotHeld)
	denied := errors.New("permission denied")
	for _, tc := range []struct {
		name  string
		renew func(ctx context.Context) error
		want  error
	}{
		{"notHeld", func(context.Context) error { return gone }, driver.ErrNotHeld},
		// Past the renewal's deadline too: a lease gone is no late answer.
		{"notHeldLate", func(ctx context.Context) error { <-ctx.Done(); return gone }, driver.ErrNotHeld},
		{"other", func(context.Context) error { return denied }, denied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := StartWaiter(time.Now().Add(-time.Hour), 150*time.Millisecond, tc.renew)
			defer w.Stop()
			var got error
			select {
			case got = <-w.Failed():
			case <-time.After(30 * time.Second):
				t.Fatal("no failure reported (watchdog)")
			}
			if !errors.Is(got, tc.want) {
				t.Fatalf("Failed received %v, want %v", got, tc.want)
			}
			if err := w.Stop(); !errors.Is(err, tc.want) {
				t.Fatalf("Stop = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestWaiter_stopWaitsForTheRenewalInFlight(t *testing.T) {
	var returned atomic.Bool
	started := make(chan struct{})
	w := StartWaiter(time.Now().Add(-time.Hour), time.Hour, func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		returned.Store(true)
		return ctx.Err()
	})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal (watchdog)")
	}
	if err := w.Stop(); err != nil {
		t.Fatalf("Stop = %v, want nil: a renewal cut off by Stop is no failure", err)
	}
	if !returned.Load() {
		t.Fatal("Stop returned while the renewal was in flight")
	}
	select {
	case err := <-w.Failed():
		t.Fatalf("Failed received %v after Stop", err)
	default:
	}
}
