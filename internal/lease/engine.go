// Package lease is the one lease engine behind every dlock backend: it keeps
// a driver.Grant renewed, computes the local deadline after which the grant
// must be presumed gone, and closes Done no later than that deadline.
//
// The safety argument. A driver reports ValidFrom, a local time not later than
// the moment the server granted or extended the key, and Validity, how long
// the server keeps it from then by the server's clock. No other client can be
// granted the key before ValidFrom+Validity by the server's clock. Locally we
// stop trusting the grant at
//
//	deadline = ValidFrom + Validity - Validity*DriftFactor - DriftMargin
//
// which is earlier even if the two clocks run at rates that differ by up to
// DriftFactor. Renewals move ValidFrom to the moment the renew request was
// SENT, never to when its reply arrived, because the server may have acted on
// it at any point in between. Done and Err compare the clock with the deadline
// on every call, so a caller that checks them observes the loss even when the
// goroutine that would close the channel has not been scheduled yet.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
)

const (
	// DriftFactor is the share of a lease's validity given up to differences
	// between the client's and the server's clock rates (1%, as Redlock).
	DriftFactor = 0.01
	// DriftMargin is a fixed part given up on top of DriftFactor, for timer
	// granularity.
	DriftMargin = 2 * time.Millisecond
)

// ErrReleased is the Err of a lease after a successful Release.
var ErrReleased = errors.New("dlock: lease released by Unlock")

// Engine keeps one grant alive. It is safe for concurrent use.
type Engine struct {
	key      string
	grant    driver.Grant
	validity time.Duration
	log      *slog.Logger

	stop chan struct{} // closed by Release to end the loop
	done chan struct{} // the public Done channel

	mu       sync.Mutex
	deadline time.Time // local deadline; guarded by mu
	err      error     // non-nil once done is closed; guarded by mu
	released bool      // Release was called; guarded by mu
}

// Start begins renewing g in a goroutine. log may be nil.
func Start(key string, g driver.Grant, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		key:      key,
		grant:    g,
		validity: g.Validity(),
		log:      log,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	from := countFrom(g.ValidFrom())
	e.deadline = e.deadlineFrom(from)
	go e.loop(from)
	return e
}

// deadlineFrom is the local deadline of a grant made or renewed no earlier
// than start.
func (e *Engine) deadlineFrom(start time.Time) time.Time {
	safe := e.validity - time.Duration(float64(e.validity)*DriftFactor) - DriftMargin
	return start.Add(safe)
}

// Done returns a channel closed when the lease is lost or released.
func (e *Engine) Done() <-chan struct{} {
	e.checkDeadline()
	return e.done
}

// Err returns nil while the lease is held, and afterwards why it ended.
func (e *Engine) Err() error {
	e.checkDeadline()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Deadline returns the local time after which the lease is presumed lost
// unless renewed.
func (e *Engine) Deadline() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.deadline
}

func (e *Engine) checkDeadline() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil && !time.Now().Before(e.deadline) {
		e.endLocked(e.expiredErr())
	}
}

func (e *Engine) expiredErr() error {
	return fmt.Errorf("%w: key %q: not renewed within its validity of %v (deadline passed)", driver.ErrLeaseLost, e.key, e.validity)
}

// endLocked closes done with err. e.mu must be held.
func (e *Engine) endLocked(err error) {
	if e.err != nil {
		return
	}
	e.err = err
	close(e.done)
}

// end is endLocked for the loop, which may still be running after Release
// started: what it finds then is ignored, since Release decides the outcome.
func (e *Engine) end(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.released {
		return
	}
	e.endLocked(err)
}

type renewResult struct {
	start time.Time
	err   error
}

// loop renews the grant about every validity/3 and ends the lease when a
// renewal is refused, the backend reports the loss, or the deadline passes.
func (e *Engine) loop(validFrom time.Time) {
	interval := e.validity / 3
	retry := max(e.validity/20, time.Millisecond)

	renewTimer := time.NewTimer(time.Until(validFrom.Add(interval)))
	defer renewTimer.Stop()
	deadlineTimer := time.NewTimer(time.Until(e.Deadline()))
	defer deadlineTimer.Stop()

	results := make(chan renewResult, 1)
	renewing := false
	// cancelRenew stops an in-flight renewal when the loop returns.
	renewCtx, cancelRenew := context.WithCancel(context.Background())
	defer cancelRenew()

	for {
		select {
		case <-e.stop:
			return
		case err := <-e.grant.Lost():
			e.end(fmt.Errorf("%w: key %q: %w", driver.ErrLeaseLost, e.key, err))
			return
		case <-deadlineTimer.C:
			// The timer may fire a little early relative to a deadline that a
			// renewal just moved; check against the current one.
			if d := e.Deadline(); time.Now().Before(d) {
				deadlineTimer.Reset(time.Until(d))
				continue
			}
			e.end(e.expiredErr())
			return
		case <-renewTimer.C:
			if renewing {
				continue
			}
			renewing = true
			start := time.Now()
			// A renewal that has not answered by the deadline cannot help.
			ctx, cancel := context.WithDeadline(renewCtx, e.Deadline())
			go func() {
				defer cancel()
				err := e.grant.Renew(ctx)
				results <- renewResult{start: countFrom(start), err: err}
			}()
		case r := <-results:
			renewing = false
			switch {
			case r.err == nil:
				e.mu.Lock()
				if d := e.deadlineFrom(r.start); d.After(e.deadline) && e.err == nil {
					e.deadline = d
				}
				e.mu.Unlock()
				deadlineTimer.Reset(time.Until(e.Deadline()))
				renewTimer.Reset(time.Until(r.start.Add(interval)))
			case errors.Is(r.err, driver.ErrNotHeld):
				e.end(fmt.Errorf("%w: key %q: the server no longer has this grant: %w", driver.ErrLeaseLost, e.key, r.err))
				return
			default:
				// Transient: the server may still hold the grant. Try again
				// soon; the deadline timer ends the lease if nothing works.
				e.log.Warn("dlock: lease renewal failed, retrying", "key", e.key, "error", r.err)
				renewTimer.Reset(retry)
			}
		}
	}
}

// Release stops renewing and releases the grant on the server. It returns an
// error satisfying errors.Is(err, driver.ErrNotHeld) when the lease had been
// lost or released already. On other errors (server unreachable) the lease
// still ends locally and the server frees the key when its validity runs out.
func (e *Engine) Release(ctx context.Context) error {
	e.mu.Lock()
	if e.released {
		e.mu.Unlock()
		return fmt.Errorf("%w: key %q: already unlocked", driver.ErrNotHeld, e.key)
	}
	e.released = true
	e.mu.Unlock()

	// Stop the loop without waiting for it: the release need not wait for
	// a goroutine to be scheduled (it is on the hand-off's critical path),
	// and whatever the loop still does is harmless — a renewal in flight
	// acts only on this grant, and end ignores its verdict from now on.
	close(e.stop)
	e.checkDeadline()

	e.mu.Lock()
	lostErr := e.err
	e.mu.Unlock()

	// Release even a lease we consider lost: the server may still have it
	// (we give up early by design), and releasing lets the next waiter in
	// without waiting for expiry. The driver never releases another owner's
	// grant, so this is safe.
	err := e.grant.Release(ctx)
	e.mu.Lock()
	e.endLocked(ErrReleased)
	e.mu.Unlock()
	switch {
	case lostErr != nil:
		return fmt.Errorf("%w: key %q: %w", driver.ErrNotHeld, e.key, lostErr)
	case err != nil:
		return err
	}
	return nil
}
