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
// it at any point in between. A driver.LaggingGrant (ZooKeeper, whose leader
// hears of a follower's clients only with the follower's next ping reply)
// also reports HeardFrom, the last moment the server that expires the grant
// is known to have heard from its owner; the engine then counts from the
// earlier of the two, and uses the requests' send times only to schedule
// renewals.
//
// Renewed together. A Scheduler renews the leases of one client and
// validity with one driver.BatchRenewer request per tick. The argument
// above holds for each lease alone: the batch renews each grant as a
// Renew sent at the batch's start would, so each lease's ValidFrom moves to
// the send time of the request that renewed IT; a lease whose result in the
// batch is an error is handled exactly as a failed single renewal
// (driver.ErrNotHeld ends it, another error is retried until its own
// deadline), whatever the others' results; and the group's timer, which
// fires at the earliest deadline of its leases even while a batch is in
// flight, closes each Done no later than that lease's deadline. Joining a
// group never delays a renewal: a lease is renewed at the group's next
// tick or, if that is later, at its own first renewal, which brings the
// tick forward.
//
// Done and Err compare the clock with the deadline
// on every call, so a caller that checks them observes the loss even when the
// goroutine that would close the channel has not been scheduled yet.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
//
// Started by Start, it runs on a timer (time.AfterFunc), not on a
// goroutine of its own (started by a Scheduler, on its group's timer): a
// held lease costs no goroutine, and starting or releasing one wakes no
// other thread. Lock and Unlock are on the hand-off's critical path, and on
// a busy machine a goroutine's start-up and its wake-up at Release cost more
// than the rest of a Redis cycle. Only a grant with a Lost channel that is
// not a driver.LostNotifier gets a goroutine, to wait on that channel.
type Engine struct {
	key      string
	grant    driver.Grant
	validity time.Duration
	log      *slog.Logger
	obs      Observer // nil: nobody observes, and the engine reads no clock for it
	clk      clock
	// grp renews the lease with the others of its client and validity
	// (see Scheduler); nil when the lease runs on a timer of its own.
	grp *group
	idx int // position in grp.members, -1 outside; guarded by grp.s.mu

	stop chan struct{} // closed by Release to end watchLost; nil without it

	mu sync.Mutex
	// done is the public Done channel, made by the first Done (a lease
	// nobody waits on costs none): closedChan once the lease has ended
	// before. Guarded by mu.
	done     chan struct{}
	deadline time.Time // local deadline; guarded by mu
	err      error     // non-nil once done is closed; guarded by mu
	reason   error     // err without the key, for Release's error; guarded by mu
	released bool      // Release was called; guarded by mu
	// timer runs onTimer at renewAt, or at the deadline while a renewal
	// is in flight; nil with grp. Guarded by mu.
	timer       *time.Timer
	cancelRenew context.CancelFunc // of the renewal in flight, if any; guarded by mu
	// limitTimer runs onLimit (see LimitAt), with limitReason; guarded by mu.
	limitTimer  *time.Timer
	limitReason error

	renewAt time.Time // when the next renewal is due; guarded by mu
	ending  End       // why the lease ended, once err is set; guarded by mu
	endedAt time.Time // when, with an observer; guarded by mu
	// inRelease says the server call of the first Release (or of the
	// limit's release) has not returned: a later Release waits for it,
	// on releasing (made by the first to wait, closed when the call
	// returns), so that what follows a Release finds the server settled.
	// Guarded by mu.
	inRelease bool
	releasing chan struct{}

	// reportMu orders the observer's calls: no Renewed after Ended.
	reportMu    sync.Mutex
	reportedEnd bool // guarded by reportMu
}

// Start begins renewing g about every Validity/3, on timers of its own.
// log and obs may be nil.
func Start(key string, g driver.Grant, log *slog.Logger, obs Observer) *Engine {
	e := new(Engine)
	StartIn(e, nil, key, g, log, obs)
	return e
}

// StartIn begins renewing g in e, a zero Engine that the caller keeps
// (inside a struct of its own, which saves an allocation per lease): with
// the other leases of s when s is not nil (see Scheduler.Start), and
// otherwise as Start does. e must not be copied afterwards.
func StartIn(e *Engine, s *Scheduler, key string, g driver.Grant, log *slog.Logger, obs Observer) {
	if s != nil {
		s.start(e, key, g, log, obs)
		return
	}
	e.init(key, g, log, obs, realClock{})
	// onTimer takes mu first, so it sees the timer set even when it
	// fires at once (a grant already past its deadline).
	e.mu.Lock()
	e.timer = time.AfterFunc(time.Until(e.renewAt), e.onTimer)
	e.mu.Unlock()
	e.watch()
}

// init sets up e for g with its deadline and first renewal, not yet
// renewing.
func (e *Engine) init(key string, g driver.Grant, log *slog.Logger, obs Observer, clk clock) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e.key, e.grant, e.validity, e.log, e.obs, e.clk, e.idx = key, g, g.Validity(), log, obs, clk, -1
	validFrom := g.ValidFrom()
	e.deadline = e.deadlineFrom(e.heardFrom(validFrom))
	e.renewAt = e.nextRenewal(countFrom(validFrom))
}

// watch starts waiting for the news that the grant is gone: with a
// function for a driver.LostNotifier, and otherwise on the grant's Lost
// channel, if it has one.
func (e *Engine) watch() {
	if ln, ok := e.grant.(driver.LostNotifier); ok {
		ln.AfterLost(e.lost)
		return
	}
	if lost := e.grant.Lost(); lost != nil {
		e.stop = make(chan struct{})
		go e.watchLost(lost)
	}
}

// renewInterval is the time between renewals.
func (e *Engine) renewInterval() time.Duration { return e.validity / 3 }

// heardFrom is the moment the validity of a grant made or renewed by a
// request sent at sent counts from: sent itself, or for a
// driver.LaggingGrant the earlier of sent and what the server is known to
// have heard (a ZooKeeper leader may not have heard of the request yet).
// countFrom applies to the result, so that the dlock_weak build stays
// weak for every backend.
func (e *Engine) heardFrom(sent time.Time) time.Time {
	if lg, ok := e.grant.(driver.LaggingGrant); ok {
		if h := lg.HeardFrom(); h.Before(sent) {
			sent = h
		}
	}
	return countFrom(sent)
}

// nextRenewal is when to renew a grant last made or renewed by a request
// sent at start: a third of the validity later, but no later than a third
// of the validity before the deadline, so that a failed renewal has the
// same time to be retried whatever the deadline counts from. For a grant
// counted from its renewals' starts the two coincide but for the drift
// margin, and the first wins; a driver.LaggingGrant counted from an
// earlier moment renews a little sooner. e.mu must be held.
func (e *Engine) nextRenewal(start time.Time) time.Time {
	next := start.Add(e.renewInterval())
	if latest := e.deadline.Add(-e.renewInterval()); latest.Before(next) {
		next = latest
	}
	return next
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
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done == nil {
		if e.err != nil {
			return closedChan
		}
		e.done = make(chan struct{})
	}
	return e.done
}

// closedChan is the Done channel of a lease that ended before anybody
// asked for it.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

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
	ended := e.err == nil && !e.clk.Now().Before(e.deadline) && e.endLocked(Expired, e.expiredErr())
	e.mu.Unlock()
	if ended {
		e.finish()
	}
}

// finish follows an endLocked that reported true, with e.mu released: the
// lease leaves its group and the observer hears of the end.
func (e *Engine) finish() {
	if e.grp != nil {
		e.grp.leave(e)
	}
	e.reportEnd()
}

func (e *Engine) expiredErr() error {
	return fmt.Errorf("%w: not renewed within its validity of %v", driver.ErrLeaseLost, e.validity)
}

// endLocked closes done with reason and stops renewing, and reports
// whether it did: then the caller calls reportEnd once e.mu is released.
// e.mu must be held. A loss is reported by Err with the key, since
// Lease.Err is read away from any call that would name it; Release says it
// once more, nested in its own error, without (the caller of Unlock names
// the key).
func (e *Engine) endLocked(end End, reason error) bool {
	if e.err != nil {
		return false
	}
	e.reason, e.err, e.ending = reason, reason, end
	if e.obs != nil {
		e.endedAt = e.clk.Now()
		if end == Expired {
			// Found at the deadline or later (by Done or Err): it was
			// lost at the deadline.
			e.endedAt = e.deadline
		}
	}
	if errors.Is(reason, driver.ErrLeaseLost) || (reason == e.limitReason && reason != nil) {
		e.err = fmt.Errorf("lease %q: %w", e.key, reason)
	}
	if e.done != nil {
		close(e.done)
	}
	e.stopTimersLocked()
	return true
}

// stopTimersLocked stops the timers and cancels a renewal in flight. A
// timer function already started finds the lease ended or released and
// does nothing. e.mu must be held.
func (e *Engine) stopTimersLocked() {
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.limitTimer != nil {
		e.limitTimer.Stop()
	}
	if e.cancelRenew != nil {
		e.cancelRenew()
		e.cancelRenew = nil
	}
}

// end is endLocked for the timers and watchLost, which may still run after
// Release started: what they find then is ignored, since Release decides
// the outcome.
func (e *Engine) end(end End, err error) {
	e.mu.Lock()
	ended := !e.released && e.endLocked(end, err)
	e.mu.Unlock()
	if ended {
		e.finish()
	}
}

// watchLost ends the lease when the backend reports the grant lost.
func (e *Engine) watchLost(lost <-chan error) {
	select {
	case <-e.stop:
	case err := <-lost:
		e.lost(err)
	}
}

// lost ends the lease when the backend reports the grant gone.
func (e *Engine) lost(err error) {
	e.end(Dropped, fmt.Errorf("%w: %w", driver.ErrLeaseLost, err))
}

// onTimer ends the lease when its deadline has passed, and otherwise
// renews it when the renewal is due, in the timer's goroutine. The timer
// may fire early relative to a deadline or renewal that has just moved:
// it then waits for the current one. Only one renewal runs at a time;
// meanwhile the timer waits for the deadline, which a renewal that has
// not answered by then cannot move.
func (e *Engine) onTimer() {
	e.mu.Lock()
	if e.err != nil || e.released {
		e.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(e.deadline) {
		ended := e.endLocked(Expired, e.expiredErr())
		e.mu.Unlock()
		if ended {
			e.finish()
		}
		return
	}
	if e.cancelRenew != nil || now.Before(e.renewAt) {
		e.armLocked()
		e.mu.Unlock()
		return
	}
	// A renewal that has not answered by the deadline cannot help.
	ctx, cancel := context.WithDeadline(context.Background(), e.deadline)
	e.cancelRenew = cancel
	e.armLocked()
	e.mu.Unlock()

	sent := time.Now()
	err := e.grant.Renew(ctx)
	var latency time.Duration
	if e.obs != nil {
		latency = time.Since(sent)
	}
	cancel()

	e.mu.Lock()
	e.cancelRenew = nil
	if e.err != nil || e.released {
		e.mu.Unlock()
		return
	}
	late := sent.Sub(e.renewAt)
	ended := e.renewedLocked(sent, err)
	if !ended {
		e.armLocked()
	}
	e.mu.Unlock()
	if e.obs != nil {
		e.reportRenewed(latency, late, err)
	}
	if ended {
		e.finish()
	}
}

// armLocked sets the timer for the next renewal or, while one is in
// flight, for the deadline. e.mu must be held.
func (e *Engine) armLocked() {
	at := e.renewAt
	if e.cancelRenew != nil || e.deadline.Before(at) {
		at = e.deadline
	}
	e.timer.Reset(time.Until(at))
}

// renewedLocked applies the answer err to a renewal of the lease sent at
// sent, and reports whether it ended the lease (then the caller calls
// finish). A success moves the deadline to a validity after sent and the
// next renewal to a third of it later; ErrNotHeld ends the lease; any
// other error is transient, retried soon, and the deadline ends the lease
// if nothing works. It sets renewAt and the deadline but no timer. e.mu must be held,
// and the lease neither ended nor released.
func (e *Engine) renewedLocked(sent time.Time, err error) bool {
	switch {
	case err == nil:
		if d := e.deadlineFrom(e.heardFrom(sent)); d.After(e.deadline) {
			e.deadline = d
		}
		// After the reply, so that the dlock_weak build's countFrom
		// sees when it arrived.
		e.renewAt = e.nextRenewal(countFrom(sent))
		return false
	case errors.Is(err, driver.ErrNotHeld):
		// The driver's "not held" is what "lease lost" means here: say
		// only the latter, and the driver's detail.
		return e.endLocked(Dropped, nest(driver.ErrLeaseLost, err, driver.ErrNotHeld.Error()+": "))
	default:
		// Transient: the server may still hold the grant. Try again soon;
		// the deadline ends the lease if nothing works. The observer
		// hears of it (dlock logs it with WithLogger).
		e.renewAt = e.clk.Now().Add(max(e.validity/20, time.Millisecond))
		return false
	}
}

// Release stops renewing, ends the lease with ErrReleased and releases the
// grant on the server. It returns an error satisfying
// errors.Is(err, driver.ErrNotHeld) when the lease had been lost or released
// already. On other errors (server unreachable) the lease still ends locally
// and the server frees the key when its validity runs out.
func (e *Engine) Release(ctx context.Context) error { return e.ReleaseWith(ctx, ErrReleased) }

// ReleaseWith is Release with reason, instead of ErrReleased, as the Err of
// the lease (unless it was lost already): dlock.Client.Close ends the leases
// it releases with ErrClosed.
func (e *Engine) ReleaseWith(ctx context.Context, reason error) error {
	e.mu.Lock()
	if e.released {
		if e.inRelease && e.releasing == nil {
			e.releasing = make(chan struct{})
		}
		releasing, limit := e.releasing, e.limitReason
		limited := limit != nil && e.reason == limit
		e.mu.Unlock()
		if releasing != nil {
			select {
			case <-releasing:
			case <-ctx.Done():
			}
		}
		if limited {
			// "dlock: lock not held: maximum hold reached: …".
			return nest(driver.ErrNotHeld, limit, "dlock: ")
		}
		return fmt.Errorf("%w: already unlocked", driver.ErrNotHeld)
	}
	e.released, e.inRelease = true, true
	defer e.endRelease()
	// Stop renewing without waiting for a renewal in flight: it acts only
	// on this grant, and its verdict is ignored from now on.
	e.stopTimersLocked()
	e.mu.Unlock()
	if e.stop != nil {
		close(e.stop)
	}
	e.checkDeadline()

	// End the lease before the server hears of the release: the release
	// lets the next waiter in at once, and Done must be closed by then
	// (the promise of the package documentation). It matters when
	// somebody else still watches the lease, as Client.Do's function does
	// while Client.Close releases the lease under it.
	e.mu.Lock()
	end := Released
	if reason != nil && reason == e.limitReason {
		end = Limited
	}
	lostErr := e.reason
	ended := e.endLocked(end, reason)
	e.mu.Unlock()
	if ended {
		e.finish()
	}

	// Release even a lease we consider lost: the server may still have it
	// (we give up early by design), and releasing lets the next waiter in
	// without waiting for expiry. The driver never releases another owner's
	// grant, so this is safe.
	err := e.grant.Release(ctx)
	switch {
	case lostErr != nil:
		// "dlock: lock not held: lease lost: …", not "dlock: … dlock: …".
		return nest(driver.ErrNotHeld, lostErr, "dlock: ")
	case err != nil:
		return err
	}
	return nil
}

// endRelease tells the Releases waiting for the first one that its server
// call has returned.
func (e *Engine) endRelease() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inRelease = false
	if e.releasing != nil {
		close(e.releasing)
	}
}

// nested is an error of one category caused by another error: errors.Is
// finds both, and the text says each category once.
type nested struct {
	text string
	errs []error
}

func (e *nested) Error() string   { return e.text }
func (e *nested) Unwrap() []error { return e.errs }

// nest returns an error that satisfies errors.Is with cat and with all that
// cause does, reading "<cat>: <cause>" with the prefix trim (what cat
// already says, or the "dlock: " of a nested dlock sentinel) cut from the
// front of cause's text.
func nest(cat, cause error, trim string) error {
	return &nested{text: cat.Error() + ": " + strings.TrimPrefix(cause.Error(), trim), errs: []error{cat, cause}}
}

// Abandon stops renewing and ends the lease with reason (unless it ended
// already), without releasing the grant: the server frees the key when the
// validity of the last renewal runs out, as if this process had died.
// dlock.Client.Close abandons the leases in their minimum hold (dlock's
// HoldAtLeast), since releasing them would let the job run again at once.
// A grant that the server would not free by itself (a driver.Abandoner)
// is told, and Abandon returns its error. A Release after Abandon returns
// an error satisfying errors.Is(err, driver.ErrNotHeld).
func (e *Engine) Abandon(ctx context.Context, reason error) error {
	e.mu.Lock()
	if e.released {
		e.mu.Unlock()
		return nil
	}
	e.released = true
	e.stopTimersLocked()
	ended := e.endLocked(Abandoned, reason)
	e.mu.Unlock()
	if ended {
		e.finish()
	}
	if e.stop != nil {
		close(e.stop)
	}
	if a, ok := e.grant.(driver.Abandoner); ok {
		return a.Abandon(ctx)
	}
	return nil
}

// LimitAt ends the lease at the time at with reason, unless it has ended
// by then: it stops renewing, closes Done (Err then reports reason, with
// the key) and releases the grant, waiting at most the validity for the
// server. It is dlock's HoldAtMost. A Release during the limit's release
// waits for it, and returns an error satisfying errors.Is with
// driver.ErrNotHeld and with reason. Call it once, before anybody else
// can end the lease.
func (e *Engine) LimitAt(at time.Time, reason error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil || e.released {
		return // ended already: no timer to stop later
	}
	e.limitReason = reason
	e.limitTimer = time.AfterFunc(time.Until(at), e.onLimit)
}

// StopLimit cancels LimitAt before the limit, for a caller that releases
// the lease by then anyway (dlock's Unlock deferred by a minimum hold that
// ends no later). It reports false when the limit has already come, or
// the lease has ended.
func (e *Engine) StopLimit() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.limitTimer == nil {
		return e.err == nil
	}
	return e.limitTimer.Stop() && e.err == nil
}

// onLimit releases the lease at its limit.
func (e *Engine) onLimit() {
	e.mu.Lock()
	if e.err != nil || e.released {
		e.mu.Unlock()
		return
	}
	reason := e.limitReason
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), e.validity)
	defer cancel()
	if err := e.ReleaseWith(ctx, reason); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		// The server frees the key when the validity runs out.
		e.log.Warn("dlock: release at the maximum hold failed", "key", e.key, "error", err)
	}
}
