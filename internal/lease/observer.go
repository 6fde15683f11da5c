package lease

import "time"

// Observer hears of the events of a lease's life: dlock's Hooks. The
// engine calls it synchronously, outside its own lock, from the goroutine
// of the event (a timer's, a Scheduler group's, the lost-lease watcher's,
// or that of the caller of Release, Abandon, Done or Err); never Renewed
// after Ended. Its methods must not
// call the engine.
type Observer interface {
	// Renewed follows each renewal sent while the lease was held and
	// answered while it still was: latency from sending it to its answer,
	// late how long after its scheduled moment it was sent, err nil when
	// the server extended the lease.
	Renewed(latency, late time.Duration, err error)
	// Ended is called once, when the lease ends: why, when (for Expired,
	// the deadline that passed), and the lease's Err.
	Ended(end End, at time.Time, err error)
}

// End is why a lease ended.
type End uint8

// The ways a lease ends.
const (
	// Released: Release or ReleaseWith (but for LimitAt's).
	Released End = iota + 1
	// Expired: the local deadline passed with no renewal.
	Expired
	// Dropped: the server said the grant is gone (a renewal's
	// driver.ErrNotHeld, or the grant's Lost channel).
	Dropped
	// Limited: released by LimitAt.
	Limited
	// Abandoned: Abandon.
	Abandoned
)

// Ended reports why and when the lease ended, once Done is closed, for an
// engine started with an Observer; ok is false before. Without an
// Observer the time is zero: the engine reads the clock for observers
// only.
func (e *Engine) Ended() (end End, at time.Time, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ending, e.endedAt, e.err != nil
}

// reportRenewed passes a renewal's verdict to the observer, unless the
// end has been reported already.
func (e *Engine) reportRenewed(latency, late time.Duration, err error) {
	e.reportMu.Lock()
	defer e.reportMu.Unlock()
	if e.reportedEnd {
		return
	}
	e.obs.Renewed(latency, max(late, 0), err)
}

// reportEnd passes the end to the observer. Call it once, after the
// endLocked that reported true, with e.mu released.
func (e *Engine) reportEnd() {
	if e.obs == nil {
		return
	}
	e.mu.Lock()
	end, at, err := e.ending, e.endedAt, e.err
	e.mu.Unlock()
	e.reportMu.Lock()
	defer e.reportMu.Unlock()
	e.reportedEnd = true
	e.obs.Ended(end, at, err)
}
