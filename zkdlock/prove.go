package zkdlock

import (
	"context"
	"time"

	"github.com/dlockdev/dlock/internal/lease"
)

// grant makes the grant of our node, which heads the queue as of a
// listing sent at listSent. It returns nil when the node's watch fired or
// the session changed since it was set: run then looks again.
func (a *attempt) grant(ctx context.Context, listSent time.Time) (*grant, error) {
	if a.ownFired() || a.d.conn.SessionID() != a.sid {
		return nil, nil
	}
	// The server answered the listing, so the session was alive after it
	// was sent.
	return a.grantFrom(ctx, listSent)
}

// grantFrom makes the grant of our node, known to be first, given a moment
// after which the server is known to have heard from the session. The
// grant's ValidFrom must be such a moment; the latest known is the last
// answered request of this session. On a server stated standalone, if
// even that is more than a third of the session timeout ago (a long wait
// on an idle Client, or a slow server), one exists on our node renews the
// proof, and checks the node once more; nil, nil means it is gone.
// Otherwise (an ensemble, or a server found standalone) the lease counts
// from what the server that expires the session is known to have heard
// (see heard and proveHeard).
func (a *attempt) grantFrom(ctx context.Context, validFrom time.Time) (*grant, error) {
	d := a.d
	sid := a.sid
	if t, ok := d.aliveSince(sid); ok && t.After(validFrom) {
		validFrom = t
	}
	if d.lag() > 0 {
		synced, ok, err := a.proveHeard(ctx)
		if err != nil || !ok {
			return nil, err
		}
		if synced.After(validFrom) {
			validFrom = synced
		}
	} else if time.Since(validFrom) > d.timeout()/3 {
		path := a.mePath()
		sent := time.Now()
		r, err := call(ctx, nil, a.callTimeout(), func() (existsW, error) {
			ok, stat, err := d.conn.Exists(path)
			return existsW{ok: ok, stat: stat}, err
		})
		if err != nil {
			return nil, err
		}
		if !r.ok || r.stat.EphemeralOwner != sid || d.conn.SessionID() != sid {
			a.syncFirst = true
			return nil, nil // the listing will tell
		}
		d.noteAlive(sid, sent)
		validFrom = sent
	}
	g := newGrant(d, a.req.Key, a.mePath(), sid, a.czxid, publishes(a.label), a.plainRelease(), a.dropKey(), validFrom, a.own)
	if a.req.LockDelay > 0 {
		g.mark = a.markPath()
	}
	return g, nil
}

// proveHeard makes sure, before a grant, that the leader is known to have
// heard from the session recently enough for the lease to live until its
// first renewal: the lease counts from that moment (grant.HeardFrom), and
// the engine renews a third of the session timeout before the deadline at
// the latest, so the moment must leave at least that much (with the
// engine's margins). An uncontended Lock has its proof already, mostly: a
// fresh session's handshake, or the session's pings, which the create (a
// write through the leader) proves reported. A waiter that waited long on
// an otherwise idle Client has renewed it while it waited (see keepFresh);
// without that, it sends a sync, which proves the pings (or the
// waiter's own requests) answered half a tick and more before it; when the
// Client saw nothing answered in that window (a Client made with New,
// which cannot see the pings), it waits until the sync it just sent can be
// proved and sends another. While the Client makes the standalone check
// (Detect, see checkStandalone), the check takes the place of the sync and
// proves itself: one request, no wait. It returns when the last sync (or
// check) was sent (zero if none was), and ok false when the node or the
// session was lost meanwhile (the listing will tell).
func (a *attempt) proveHeard(ctx context.Context) (synced time.Time, ok bool, err error) {
	d := a.d
	sid := a.sid
	for i := 0; ; i++ {
		if from, known := d.heard.since(sid); known && d.heardDue(from).After(time.Now()) {
			return synced, true, nil
		}
		if i == 2 {
			// A sync proves the one lag before it (the lag is at most 9/32
			// of the timeout): only a slow server gets here. The lease
			// counts from what is known, however short.
			return synced, true, nil
		}
		if i == 1 {
			// Nothing answered long enough ago: wait until the sync just
			// sent can be proved.
			if _, answered, known := d.heard.last(sid); known {
				wait := time.NewTimer(time.Until(d.heard.provableAt(answered)))
				select {
				case <-wait.C:
				case <-ctx.Done():
					wait.Stop()
					return time.Time{}, false, ctx.Err()
				}
			}
		}
		// The standalone check, while the server answers it empty: it
		// proves its own send time.
		sent, proved, err := d.checkStandalone(ctx, a.callTimeout())
		if err != nil {
			return time.Time{}, false, err
		}
		if !proved {
			sent = time.Now()
			// sync: through the leader, after the follower's ping replies.
			if err := call0(ctx, nil, a.callTimeout(), func() error {
				_, err := d.conn.Sync(a.keyPath)
				return err
			}); err != nil {
				return time.Time{}, false, err
			}
			d.noteViaLeader(sid, sent)
		}
		synced = sent
		// Our node is still there: had it been deleted before the sync (or
		// the check) was answered, its watch would have fired first.
		if a.ownFired() || d.conn.SessionID() != sid {
			a.syncFirst = true
			return time.Time{}, false, nil
		}
	}
}

// heardDue returns the moment after which a grant can no longer count its
// lease from from, a moment the leader heard from the session, without a
// request first (see proveHeard): the lease must then have a third of the
// session timeout left, after the engine's margins.
func (d *zkDriver) heardDue(from time.Time) time.Time {
	safe := d.timeout() - time.Duration(float64(d.timeout())*lease.DriftFactor) - lease.DriftMargin
	return from.Add(safe - d.timeout()/3)
}

// proofDue returns the moment after which a grant on session sid would
// send a request first, to prove that the session is alive (see
// grantFrom): the zero time when it would now.
func (d *zkDriver) proofDue(sid int64) time.Time {
	if d.lag() > 0 {
		if from, known := d.heard.since(sid); known {
			return d.heardDue(from)
		}
		return time.Time{}
	}
	if sent, known := d.aliveSince(sid); known {
		return sent.Add(d.timeout() / 3)
	}
	return time.Time{}
}

// beginWait counts an attempt that waits for a notification that may grant
// it without a listing, until endWait, and makes sure that the proof its
// grant needs is kept fresh meanwhile (see keepFresh).
func (d *zkDriver) beginWait() {
	d.freshMu.Lock()
	d.waiters++
	start := !d.freshening
	d.freshening = true
	d.freshMu.Unlock()
	if start {
		// Not a janitor: Close need not wait for it.
		go d.keepFresh(d.ctx)
	}
}

// endWait ends what beginWait began.
func (d *zkDriver) endWait() {
	d.freshMu.Lock()
	d.waiters--
	d.freshMu.Unlock()
}

// keepFresh renews, while the Client has waiters that a release may grant
// without a listing, the proof of the session that their grants would
// otherwise send after the release (see grantFrom): the standalone check, a
// sync, or on a server stated standalone a read, a twelfth of the session
// timeout before the proof is due, so that a hand-off after a long wait
// needs no request. It proves what proveHeard's requests do, by the same
// rule, only sooner, and nothing about any node, which each grant's own
// checks still do. One request at a time, for all the Client's waiters; its
// errors are left to the grants, which prove again if need be. It returns
// when it finds no waiter, or when ctx (the driver's) ends.
func (d *zkDriver) keepFresh(ctx context.Context) {
	t := time.NewTimer(d.freshenAfter(0))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.freshMu.Lock()
			d.freshening = false
			d.freshMu.Unlock()
			return
		case <-t.C:
		}
		d.freshMu.Lock()
		if d.waiters == 0 {
			d.freshening = false
			d.freshMu.Unlock()
			return
		}
		d.freshMu.Unlock()
		if time.Until(d.proofDue(d.conn.SessionID())) <= d.timeout()/12 {
			d.freshen(ctx)
		}
		t.Reset(d.freshenAfter(d.timeout() / 16))
	}
}

// freshenAfter returns how long keepFresh waits before it renews the proof:
// until a twelfth of the session timeout before it is due, and at least
// until a request through the leader would prove something new (the last
// answered request, lag after its reply); never less than least, and never
// more than a quarter of the session timeout, so that a new session is
// seen to.
func (d *zkDriver) freshenAfter(least time.Duration) time.Duration {
	sid := d.conn.SessionID()
	due := d.proofDue(sid)
	if !due.IsZero() {
		due = due.Add(-d.timeout() / 12)
	}
	if d.lag() > 0 {
		if _, replied, known := d.heard.last(sid); known {
			due = later(due, d.heard.provableAt(replied))
		}
	}
	return min(max(time.Until(due), least), d.timeout()/4)
}

// freshen sends one request that renews the proof of the session (see
// keepFresh).
func (d *zkDriver) freshen(ctx context.Context) {
	sid := d.conn.SessionID()
	if sid == 0 {
		return
	}
	if d.lag() == 0 {
		// Any answered request: the server expires the session itself.
		sent := time.Now()
		if call0(ctx, nil, d.timeout(), func() error {
			_, _, err := d.conn.Exists(d.root)
			return err
		}) == nil {
			d.noteAlive(sid, sent)
		}
		return
	}
	if _, proved, err := d.checkStandalone(ctx, d.timeout()); err != nil || proved {
		return
	}
	sent := time.Now()
	if call0(ctx, nil, d.timeout(), func() error {
		_, err := d.conn.Sync(d.root)
		return err
	}) == nil {
		d.noteViaLeader(sid, sent)
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// handOff makes the grant of a waiter whose predecessor released the key
// or, being the head of the queue, was deleted, without listing again (see
// grantFrom for its ValidFrom).
func (a *attempt) handOff(ctx context.Context) (*grant, error) {
	if a.d.conn.SessionID() != a.sid {
		return nil, nil
	}
	a.last, a.alone = false, false // waiters may have listed behind ours before its grant
	if a.delayAhead {
		// An entry ahead may have ended without a release: the listing
		// shows whether a lock-delay is in force (see lockdelay.go).
		a.step = stepList
		return nil, nil
	}
	return a.grantFrom(ctx, time.Time{})
}
