package zkdlock

import (
	"sync"
	"time"
)

// heard keeps track of what the server that expires the Client's session
// is known to have heard from it: the moment a lease's validity may be
// counted from.
//
// In an ensemble only the leader expires sessions, and a follower answers
// its clients itself. ZooKeeper's source (3.8) says how the leader learns
// that a follower's session is alive:
//
//   - Every request a follower receives touches the session in the
//     follower's LearnerSessionTracker, which only adds it to a touch table
//     (ZooKeeperServer.submitRequestNow → touch).
//   - The leader pings each learner every tickTime/2 (Leader.lead); the
//     follower answers each ping with the touch table, which it empties
//     (Learner.ping, LearnerSessionTracker.snapshot); the leader touches
//     those sessions when the reply arrives (LearnerHandler, Leader.PING),
//     setting their expiry to that moment plus the timeout, rounded up to
//     a tick (SessionTrackerImpl.touchSession, ExpiryQueue).
//   - Requests the follower forwards — writes and sync — do not touch the
//     session at the leader: LeaderZooKeeperServer.submitLearnerRequest
//     hands them to the PrepRequestProcessor, skipping the only touch, and
//     SessionTrackerImpl.checkSession touches nothing.
//   - Opening or reopening a session does touch it at the leader: the
//     follower forwards createSession (PrepRequestProcessor →
//     trackSession), or asks the leader to revalidate it (Leader.REVALIDATE
//     → checkIfValidGlobalSession → touchSession), before it answers the
//     handshake.
//
// So the leader counts a session from the last ping reply it got from the
// follower: a follower cut off from the leader just after answering a
// renewal never reports that renewal, and the leader may expire the session
// up to half a tick (plus its delivery) after the renewal before it. A
// client cannot see the follower's pings; what it can prove is this. A
// request sent at s and answered at r touched the session on the follower
// in between. The follower writes its ping replies and the requests it
// forwards on one TCP connection to the leader, in order, and answers a
// ping (so writes a reply) at most lag after any moment while it follows
// (lag: half a tick plus a margin for delivery and scheduling; see
// zkDriver.lag). So a request through the leader (a sync or a write) sent
// at s' ≥ r + lag that succeeded was written after a ping reply carrying
// that touch, and the leader, having got the later packet, got the earlier
// one: it has heard from the session at a moment after s. A reconnect in
// between makes the leader touch the session itself (revalidation), later
// still. That is the rule: the leader is known to have heard from the
// session at s when an answered request (s, r) is followed by a successful
// request through the leader sent lag after r, or when a handshake that
// began at s succeeded.
//
// With lag 0 (a server stated standalone, which expires sessions itself
// and is touched by every request) an answered request is heard at its send
// time. A server found standalone by detection keeps the lag: only the
// check, a read of /zookeeper/config answered empty, is heard at its send
// time (see checkStandalone), since the server may become an ensemble's
// follower under the session.
//
// Answered requests wait for their proof in buckets by reply time (a
// request counts as answered at the end of its bucket, which is
// conservative), so that memory stays bounded however many requests the
// Client sends. It is safe for concurrent use.
type heard struct {
	lag  func() time.Duration // see zkDriver.lag
	res  time.Duration        // bucket width
	base time.Time            // bucket i holds replies in [base+i·res, base+(i+1)·res)

	mu      sync.Mutex
	sid     int64     // the session the fields below describe; guarded by mu
	retired int64     // the session before, whose late reports are ignored; guarded by mu
	from    time.Time // the last moment sid is known to have been heard at; guarded by mu
	// last is the answered request of sid sent last; guarded by mu.
	lastSent, lastReplied time.Time
	pending               [heardBuckets]heardBucket // guarded by mu
}

// heardBuckets bounds the answered requests waiting for their proof: a
// session timeout's worth at res = timeout/heardBuckets; a request older
// than that could not extend a lease anyway.
const heardBuckets = 128

type heardBucket struct {
	idx  int64     // the bucket's number, valid when used
	used bool      // it holds a request
	sent time.Time // the latest send time of the requests answered in it
}

func newHeard(timeout time.Duration, lag func() time.Duration) *heard {
	return &heard{lag: lag, res: max(timeout/heardBuckets, time.Millisecond), base: time.Now()}
}

// use makes sid the session described, starting afresh for a new one, and
// reports false for reports that must be ignored (no session, or the one
// before). h.mu must be held.
func (h *heard) use(sid int64) bool {
	switch sid {
	case 0, h.retired:
		return false
	case h.sid:
		return true
	}
	// Session ids never come back, and go-zookeeper moves to a new session
	// only after the old one expired: a new id is the new current session.
	h.retired, h.sid = h.sid, sid
	h.from, h.lastSent, h.lastReplied = time.Time{}, time.Time{}, time.Time{}
	h.pending = [heardBuckets]heardBucket{}
	return true
}

// credit records that the leader heard from the session at t. h.mu must be
// held.
func (h *heard) credit(t time.Time) {
	if t.After(h.from) {
		h.from = t
	}
}

// bucketOf returns the bucket of a reply at t.
func (h *heard) bucketOf(t time.Time) int64 { return int64(t.Sub(h.base) / h.res) }

// bucketEnd is when bucket i ends: a reply in it came before.
func (h *heard) bucketEnd(i int64) time.Time { return h.base.Add(time.Duration(i+1) * h.res) }

// answered records a request of session sid, sent at sent, that the server
// answered at replied (or before): it touched the session on that server in
// between.
func (h *heard) answered(sid int64, sent, replied time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.use(sid) {
		return
	}
	if sent.After(h.lastSent) {
		h.lastSent, h.lastReplied = sent, replied
	}
	if h.lag() == 0 {
		h.credit(sent)
		return
	}
	if !sent.After(h.from) {
		return // proves nothing new
	}
	i := h.bucketOf(replied)
	b := &h.pending[uint64(i)%heardBuckets]
	switch {
	case !b.used || b.idx < i:
		// Empty, or an older bucket that was never proved: its requests are
		// more than a session timeout old by now, and can be forgotten.
		*b = heardBucket{idx: i, used: true, sent: sent}
	case b.idx == i && sent.After(b.sent):
		b.sent = sent
	}
	// b.idx > i: a reply so late that its bucket was reused; forget it.
}

// viaLeader records that a request of session sid that the server forwards
// to the leader (a sync, a write), sent at sent, succeeded: every request
// answered lag or more before sent has been reported to the leader.
func (h *heard) viaLeader(sid int64, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.use(sid) {
		return
	}
	cutoff := sent.Add(-h.lag())
	for j := range h.pending {
		b := &h.pending[j]
		if b.used && !h.bucketEnd(b.idx).After(cutoff) {
			h.credit(b.sent)
			*b = heardBucket{}
		}
	}
}

// leaderTouched records that the server that expires session sid (the
// leader, or a standalone server) touched it at or after at: a session
// handshake that began at at succeeded, or a standalone check sent at at
// was answered empty (see checkStandalone).
func (h *heard) leaderTouched(sid int64, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.use(sid) {
		h.credit(at)
	}
}

// since returns the last moment the leader is known to have heard from
// session sid, and false when nothing is known.
func (h *heard) since(sid int64) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sid == 0 || sid != h.sid || h.from.IsZero() {
		return time.Time{}, false
	}
	return h.from, true
}

// last returns the send and reply times of the answered request of session
// sid sent last, and false when there is none.
func (h *heard) last(sid int64) (sent, replied time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sid == 0 || sid != h.sid || h.lastSent.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	return h.lastSent, h.lastReplied, true
}

// provableAt returns the earliest moment at which a request through the
// leader, sent then, proves that the leader heard of a request answered at
// replied: lag after the end of its bucket.
func (h *heard) provableAt(replied time.Time) time.Time {
	lag := h.lag()
	if lag == 0 {
		return replied
	}
	return h.bucketEnd(h.bucketOf(replied)).Add(lag)
}
