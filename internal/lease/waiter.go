package lease

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// Waiter renews the lease of an entry that waits in a server's queue (an
// etcd waiter's), on the Engine's schedule: a third of the validity after
// the last renewal was sent. Unlike an Engine it never gives the lease up
// at its local deadline. A waiter keeps its place as long as the server
// keeps its lease, and a server that renews a lease late proves the lease
// never lapsed (etcd never renews a lease it has expired); giving up on a
// slow answer would turn a busy server into a storm of re-joins. So a
// renewal unanswered by its deadline is sent again at once. Nothing may be
// granted on a lease of unknown state: the driver confirms the lease
// before the grant (it renews a lease last renewed long ago), and the
// grant's ValidFrom is the last renewal sent, from which the Engine that
// takes over schedules its first renewal. It is safe for concurrent use.
type Waiter struct {
	renew  func(ctx context.Context) error
	sched  Engine // only its validity and deadline: the Engine's schedule
	failed chan error
	clk    clock

	mu      sync.Mutex
	timer   timer              // runs run; guarded by mu
	cancel  context.CancelFunc // of the renewal in flight; guarded by mu
	running chan struct{}      // closed when the renewal in flight returns; guarded by mu
	stopped bool               // guarded by mu
	err     error              // what ended the renewals; guarded by mu
}

// StartWaiter renews a lease of validity last renewed by a request sent at
// validFrom, calling renew, until Stop or until renew fails. renew retries
// what it takes for transient failures until its ctx ends; a renewal cut
// off by ctx's deadline (the lease's local deadline, or a third of the
// validity from its start if later) is sent again at once, unless its error
// wraps driver.ErrNotHeld. Any other error ends the renewals and is
// reported on Failed.
func StartWaiter(validFrom time.Time, validity time.Duration, renew func(ctx context.Context) error) *Waiter {
	return startWaiterOn(realClock{}, validFrom, validity, renew)
}

// startWaiterOn is StartWaiter on clk.
func startWaiterOn(clk clock, validFrom time.Time, validity time.Duration, renew func(ctx context.Context) error) *Waiter {
	w := &Waiter{renew: renew, failed: make(chan error, 1), clk: clk}
	w.sched.validity = validity
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = clk.AfterFunc(w.nextLocked(validFrom), w.run)
	return w
}

// Failed receives the error that ended the renewals, once.
func (w *Waiter) Failed() <-chan error { return w.failed }

// Stop ends the renewals, waiting for one in flight, and returns the error
// that ended them earlier, if any.
func (w *Waiter) Stop() error {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	cancel, running := w.cancel, w.running
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-running
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// nextLocked moves the deadline to that of a renewal sent at sent and
// returns the time until the next renewal. w.mu must be held.
func (w *Waiter) nextLocked(sent time.Time) time.Duration {
	w.sched.deadline = w.sched.deadlineFrom(sent)
	return w.sched.nextRenewal(sent).Sub(w.clk.Now())
}

// run renews once, in the timer's goroutine, and sets the timer again.
func (w *Waiter) run() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), later(w.sched.deadline, w.clk.Now().Add(w.sched.renewInterval())))
	running := make(chan struct{})
	defer close(running)
	w.cancel, w.running = cancel, running
	w.mu.Unlock()

	sent := w.clk.Now()
	err := w.renew(ctx)
	overdue := err != nil && ctx.Err() != nil && !errors.Is(err, driver.ErrNotHeld)
	cancel()

	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel, w.running = nil, nil
	switch {
	case w.stopped:
	case err == nil:
		w.timer.Reset(w.nextLocked(sent))
	case overdue:
		w.timer.Reset(0)
	default:
		w.stopped, w.err = true, err
		w.failed <- err
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
