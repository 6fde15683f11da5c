package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/internal/keys"
)

// Options for scheduled jobs: the same job fired on every instance of a
// service, which must run once per firing across the fleet (ShedLock's
// @SchedulerLock). A scheduler calls
//
//	err := client.Do(ctx, "orders/close", closeOrders, dlock.NoWait(), dlock.HoldAtLeast(30*time.Second))
//	if errors.Is(err, dlock.ErrLocked) {
//		// another instance runs it, or ran it less than 30s ago: skip
//	}
//
// on every instance at every tick. NoWait makes the instances that fire
// while one of them runs the job skip it instead of running it after that
// one; HoldAtLeast keeps the key held after a short job, so that an
// instance whose clock or scheduler fires a little late also skips.
// HoldAtMost (ShedLock's lockAtMostFor) releases the key of a job that
// hangs, so that a later firing can run it again:
//
//	dlock.NoWait(), dlock.HoldAtLeast(30*time.Second), dlock.HoldAtMost(10*time.Minute)

type noWaitOption struct{}

func (noWaitOption) applyLock(c *lockConfig) error {
	c.noWait = true
	return nil
}

// NoWait makes Lock, Do (and the acquiring calls of Semaphore, RWMutex and
// Election) give up at once instead of queueing when the key is not free:
// they return an error satisfying errors.Is(err, ErrLocked), as TryLock
// does, and leave nothing behind on the server. Do then does not call its
// function. It is what a job fired on every instance of a service wants:
// the instances that find another one running it skip it.
func NoWait() LockOption { return noWaitOption{} }

type holdOption time.Duration

func (o holdOption) applyLock(c *lockConfig) error {
	d := time.Duration(o)
	if d < 0 || d > MaxTTL {
		return fmt.Errorf("%w: minimum hold %v is outside [0, %v]", ErrInvalidOption, d, MaxTTL)
	}
	c.hold = d
	return nil
}

// HoldAtLeast keeps the key held until at least d after it was granted
// (for Do: after the job started), even when the job, or the holder's
// Unlock, comes sooner: ShedLock's lockAtLeastFor. Do and Unlock return at
// once; the Client keeps renewing the lease in the background and releases
// it when d has passed. A job that runs longer than d is released when it
// ends, as without the option.
//
// With NoWait, it makes a job fired on every instance run once per firing
// even when the instances' clocks or schedulers disagree by up to d (minus
// a round trip to the server): the instances that fire within d of the one
// that ran it find the key held and skip. Choose d longer than that
// disagreement and shorter than the interval between firings, or the next
// firing finds the key still held and is skipped by everybody.
//
// The minimum hold lasts only as long as somebody renews the lease. If the
// process dies, the server frees the key within the TTL, as any lease; and
// Client.Close, for the same reason, does not release a lease in its
// minimum hold (that would let an instance that fires a little later run
// the job again at once) but stops renewing it, so that the server frees
// the key when the TTL runs out. (On ZooKeeper, whose lock nodes live as
// long as the session, Close deletes them, whether it ends the session, for
// a Client of Open, or leaves the caller's connection open, for one of
// zkdlock.New: there the minimum hold ends with Close; a killed process
// keeps it for the session timeout.) With a TTL shorter than d, the key of
// a dead or closed holder may thus be free before d. Election's Resign
// gives leadership up at once, minimum hold or not.
//
// With HoldAtMost, the lease is released at the maximum hold even within
// the minimum one: a maximum shorter than the minimum is refused.
//
// d = 0 means no minimum hold; d must lie within [0, MaxTTL]: a longer
// hold outlives anything a process can be trusted to keep renewing.
func HoldAtLeast(d time.Duration) LockOption { return holdOption(d) }

type holdMaxOption time.Duration

func (o holdMaxOption) applyLock(c *lockConfig) error {
	d := time.Duration(o)
	if d < 0 || (d > 0 && d < MinTTL) {
		return fmt.Errorf("%w: maximum hold %v is neither 0 nor at least %v", ErrInvalidOption, d, MinTTL)
	}
	c.holdMax = d
	return nil
}

// HoldAtMost releases the lease d after it was granted (for Do: after the
// job started) if it is still held then: ShedLock's lockAtMostFor. A job
// that hangs in a live process would otherwise keep its lease renewed for
// ever, and the job would never run again anywhere.
//
// At the limit the Client stops renewing, closes Done, and releases the key
// on the server, which may grant it at once to another instance: Err then
// returns an error satisfying errors.Is(err, ErrHoldLimit) that names d,
// Do's function finds its context cancelled with that error as the cause
// (context.Cause) and Do returns it, joined with the function's own error,
// and a later Unlock returns an error satisfying both ErrNotHeld and
// ErrHoldLimit. The job is not stopped: it must stop when its context ends,
// or check Done, as after a lost lease, since the next holder may already
// run (use Token to fence its writes).
//
// With HoldAtLeast, the minimum hold ends no later than the maximum: a
// maximum shorter than the minimum is refused with ErrInvalidOption, and
// a lease kept by the minimum hold after an early Unlock is released at
// the minimum, as released (ErrReleased). Close releases (or, in its
// minimum hold, abandons) a lease before its maximum hold as before.
//
// d = 0 means no maximum hold. Otherwise d must be at least MinTTL; it may
// be shorter or longer than the TTL (or MaxTTL): it bounds how long the
// holder keeps the key, not how long the server waits for a dead one.
func HoldAtMost(d time.Duration) LockOption { return holdMaxOption(d) }

// checkHolds checks the holds against each other, once every option has
// been applied, whatever their order.
func (c *lockConfig) checkHolds() error {
	if c.holdMax > 0 && c.holdMax < c.hold {
		return fmt.Errorf("%w: maximum hold %v is shorter than the minimum hold %v", ErrInvalidOption, c.holdMax, c.hold)
	}
	return nil
}

// holdState is where a lease stands in its minimum hold.
type holdState int

const (
	holdHeld      holdState = iota // not unlocked yet
	holdPending                    // unlocked before the hold ended: the release timer is set
	holdReleasing                  // the release timer fired, or Unlock came after the hold
	holdAbandoned                  // Close left the lease to the server's TTL
)

// minHold is a Lease's minimum hold. Its state and timer are guarded by
// the Client's mu, so that Close, Unlock and the release timer agree on
// who ends the lease.
type minHold struct {
	until time.Time
	state holdState
	timer *time.Timer
}

// unlockAfterHold is Unlock's part for a lease with a minimum hold: before
// the hold has passed, it sets the release for when it does and reports
// deferred. After it, or once the lease has ended, Unlock releases as
// usual.
func (l *Lease) unlockAfterHold() (deferred bool, err error) {
	h := l.hold
	if h == nil {
		return false, nil
	}
	c := l.client
	c.mu.Lock()
	defer c.mu.Unlock()
	switch h.state {
	case holdPending:
		return true, opErr("unlock", l.key, fmt.Errorf("%w: already unlocked (released when its minimum hold ends)", ErrNotHeld))
	case holdReleasing, holdAbandoned:
		return false, nil // the engine says it is not held any more
	}
	left := time.Until(h.until)
	// The release at the end of the hold comes no later than a maximum
	// hold (HoldAtMost), which StopLimit cancels: the lease then ends as
	// released, not at its limit. If the limit has come, it is released.
	if left <= 0 || c.closed || l.eng.Err() != nil || !l.eng.StopLimit() {
		h.state = holdReleasing
		return false, nil
	}
	h.state = holdPending
	h.timer = time.AfterFunc(left, l.releaseAfterHold)
	return true, nil
}

// releaseAfterHold releases a lease unlocked during its minimum hold, once
// the hold has passed. Close waits for it (acquiring), so that the release
// does not race the connection's closing.
func (l *Lease) releaseAfterHold() {
	c, h := l.client, l.hold
	c.mu.Lock()
	if h.state != holdPending || c.closed {
		// Close has taken it, or is about to: it abandons it.
		c.mu.Unlock()
		return
	}
	h.state = holdReleasing
	c.acquiring.Add(1)
	c.mu.Unlock()
	defer c.acquiring.Done()
	defer c.forget(l)

	ctx, cancel := context.WithTimeout(context.Background(), l.ttl)
	defer cancel()
	if err := l.eng.Release(ctx); err != nil {
		// Lost during the hold (nobody else could have run the job
		// before that, and it is done), or the release was not
		// confirmed and the server frees the key within the TTL.
		c.log.Warn("dlock: release after the minimum hold failed", "key", l.key, "error", err)
	}
}

// takeInHold is Close's part for a lease with a minimum hold that has not
// passed: it takes the lease from Unlock and the release timer, and
// reports true; Close then abandons it (abandonWithin). It reports false
// for every other lease, which Close releases.
func (l *Lease) takeInHold() bool {
	h := l.hold
	if h == nil {
		return false
	}
	c := l.client
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.state == holdReleasing || h.state == holdAbandoned || !time.Now().Before(h.until) {
		return false
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	h.state = holdAbandoned
	return true
}

// abandonWithin stops renewing a lease taken by takeInHold without
// releasing it, waiting at most its TTL within ctx for what the backend
// does about it (see driver.Abandoner).
func (l *Lease) abandonWithin(ctx context.Context) error {
	defer l.client.forget(l)
	ctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	return l.eng.Abandon(ctx, fmt.Errorf("lease %s: %w: left to expire by Close in its minimum hold", keys.Quote(l.key), ErrClosed))
}
