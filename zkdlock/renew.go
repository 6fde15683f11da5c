package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	ibackoff "github.com/dlockdev/dlock/internal/backoff"
	"github.com/dlockdev/dlock/internal/lease"
	"github.com/go-zookeeper/zk"
)

// Renewals are batched per session. A renewal proves two things of a grant:
// that the server that expires the session has heard from it (the session
// part: a sync through the leader, or the standalone check), and that the
// grant's node is still there, ours and unwritten by anybody else (the node
// part). The session part is the same for every grant of the session, so
// RenewBatch sends it once. The node part costs no request when the grant's
// lost-lease watch proves it:
//
//   - The watch is a data watch on the node (getData or exists with a
//     watch), set by a read that found the node there, owned by the
//     grant's session and at a data version of ours. Such a watch fires on
//     any later write of the node (EventNodeDataChanged) and on its
//     deletion, by anybody, an expiry of the session included
//     (EventNodeDeleted, or EventNotWatching with ErrSessionExpired once
//     the Client hears of the expiry).
//   - ZooKeeper sends a connection the notifications of a change before the
//     reply of any request it processes after that change; a sync (or the
//     check, on a standalone server) is answered only once the server has
//     applied every transaction the leader committed before it. And
//     go-zookeeper hands a notification to the watch's channel before it
//     reads the next packet. So when the sync's reply has come, every
//     change of the node committed before the sync is in the channel.
//   - That holds on one connection. After a reconnect go-zookeeper sets its
//     watches again with the last zxid it saw, and the server then reports
//     what changed meanwhile; but it sends that request from a goroutine of
//     its own, after the requests queued during the outage, so a sync can
//     be answered before the changes of the outage are reported. The proof
//     therefore asks that the watch was set on the connection on which the
//     sync was sent and answered (connGen counts the connections that got a
//     session, from the driver's own dialer). Any other grant — its watch
//     set on an earlier connection, or by the attempt (whose read does not
//     check the version), a child watch on the key node (which no write of
//     the node fires), a connection given to New (whose reconnects the
//     driver cannot see), or a watch that has fired and is being set again
//     — is read after the sync: a getData with a watch, which sets the
//     watch the next batch can rely on, or a plain exists while the
//     watching goroutine sets one itself.
//
// That catches each way a lease can end behind the holder's back: the node
// deleted by anybody (its watch fires, or the read finds no node); written
// by anybody else (the watch fires, and the goroutine reads the node and
// judges the version, as for an election's own Publish); the session expired
// (the sync fails with ErrSessionExpired, or the Conn's session is another;
// or the node is gone); and a key node reaped and made again, in which a
// node of the same name could reappear at version 0 — only a read could be
// fooled by that, a watch fires for the deletion, and the read checks the
// node's owner session too. Each grant keeps its own fate: a node that is
// gone ends only its lease; a failed sync or standalone check fails the
// renewal of every grant it served, as a failed Renew would.

// renewReads bounds the reads one RenewBatch has in flight: go-zookeeper
// pipelines them on its connection, and more buy no fewer round trips.
const renewReads = 64

// RenewBatch implements driver.BatchRenewer: the grants of the Client's
// current session are renewed with one sync (or one standalone check) and
// no request per grant whose watch proves its node (see above). Grants of an
// earlier session are not held.
func (d *zkDriver) RenewBatch(ctx context.Context, grants []driver.Grant) []error {
	var errs []error // made at the first failure: nil means all renewed
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(grants))
		}
		errs[i] = err
	}
	sid := d.conn.SessionID()
	gs := make([]*grant, 0, len(grants))
	at := make([]int, 0, len(grants))
	for i, dg := range grants {
		g, ok := dg.(*grant)
		switch {
		case !ok || g.d != d:
			fail(i, fmt.Errorf("zkdlock: RenewBatch: grant %T not from this driver", dg))
		case g.sid != sid:
			fail(i, fmt.Errorf("%w: %w", driver.ErrNotHeld, g.sessionGone()))
		default:
			gs, at = append(gs, g), append(at, i)
		}
	}
	for k, err := range d.renew(ctx, sid, gs) {
		if err != nil {
			fail(at[k], err)
		}
	}
	return errs
}

// renew renews gs, grants of session sid (see RenewBatch), and returns
// their errors in order, or nil when all were renewed.
func (d *zkDriver) renew(ctx context.Context, sid int64, gs []*grant) []error {
	if len(gs) == 0 {
		return nil
	}
	var errs []error
	fail := func(k int, err error) {
		if errs == nil {
			errs = make([]error, len(gs))
		}
		errs[k] = err
	}
	conn := d.connGen()
	sent, err := d.proveSession(ctx, sid, gs)
	if err != nil {
		for k, g := range gs {
			fail(k, g.renewErr(err))
		}
		return errs
	}
	conn = d.sameConn(conn)
	answered := time.Now()
	var reads []int
	for k, g := range gs {
		g.proofMu.Lock()
		g.proofSent, g.proofAnswered = sent, answered
		g.proofMu.Unlock()
		if !g.watchProves(conn) {
			reads = append(reads, k)
		}
	}
	if len(reads) > 0 {
		var mu sync.Mutex
		var wg sync.WaitGroup
		next := make(chan int)
		for range min(len(reads), renewReads) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range next {
					if err := gs[k].readNode(ctx); err != nil {
						mu.Lock()
						fail(k, err)
						mu.Unlock()
					}
				}
			}()
		}
		for _, k := range reads {
			next <- k
		}
		close(next)
		wg.Wait()
	}
	if d.conn.SessionID() != sid {
		// The session ended under the batch: nothing it read is proof.
		for k, g := range gs {
			fail(k, fmt.Errorf("%w: %w", driver.ErrNotHeld, g.sessionGone()))
		}
		return errs
	}
	for k, g := range gs {
		// Last: a renewal that ends after the grant gave its node up must
		// not extend the lease (see onForfeit).
		if (errs == nil || errs[k] == nil) && !g.proved() {
			fail(k, fmt.Errorf("%w: %w", driver.ErrNotHeld, g.forfeitErr()))
		}
	}
	return errs
}

// proveSession proves to the leader that session sid is alive, for the
// grants gs: the standalone check while the server answers it empty (it
// proves its own send time, and the server that answered it expires
// sessions itself, so there is no leader to sync with); otherwise a sync, a
// round trip through the leader, which checks the session (a follower cut
// off from the leader answers reads from its stale copy for a while, but
// cannot answer this). In an ensemble the leader may not have heard of that
// round trip yet: the sync proves instead that it heard of the requests
// answered lag or more before it (see heard) — the previous renewal, when
// renewals are that far apart. So it waits, if need be, until the sync can
// prove the latest of the grants' last proofs (for a grant not renewed yet,
// the last request before its grant), once for all of them: the engine
// then counts each lease from that proof (HeardFrom), a third of the
// session timeout earlier than from this one. It returns when the sync (or
// the check) was sent.
func (d *zkDriver) proveSession(ctx context.Context, sid int64, gs []*grant) (time.Time, error) {
	gen := d.connGen()
	timeout := d.answerWithin(ctx, gs[0].validity)
	sent, proved, err := d.checkStandalone(ctx, timeout)
	if err != nil || proved {
		return sent, d.dropIfSilent(gen, timeout, err)
	}
	var proofSent, proofAnswered time.Time
	for _, g := range gs {
		g.proofMu.Lock()
		if g.proofAnswered.After(proofAnswered) {
			proofSent, proofAnswered = g.proofSent, g.proofAnswered
		}
		g.proofMu.Unlock()
	}
	if err := d.awaitProvable(ctx, sid, proofSent, proofAnswered); err != nil {
		return time.Time{}, err
	}
	gen = d.connGen()
	timeout = d.answerWithin(ctx, gs[0].validity)
	sent = time.Now()
	// sync: through the leader, after the follower's ping replies.
	if err := call0(ctx, nil, timeout, func() error {
		_, err := d.conn.Sync(gs[0].path)
		return err
	}); err != nil {
		return time.Time{}, d.dropIfSilent(gen, timeout, err)
	}
	d.noteViaLeader(sid, sent)
	return sent, nil
}

// answerWithin is how long a renewal's request, sent now, waits for its
// answer: lease.TryTimeout's half of what is left of ctx (the lease's
// deadline), at most limit and at least a millisecond (call takes 0 for no
// timeout), when the driver can drop a silent connection (see
// dropIfSilent); otherwise limit. go-zookeeper gives up on a silent
// connection only after two thirds of the session timeout without a
// packet: later than the deadline of a lease counted from what an
// ensemble's leader heard (see heard), which is up to a third of the
// session timeout older than the last renewal. The retry is the engine's,
// after a reconnect.
func (d *zkDriver) answerWithin(ctx context.Context, limit time.Duration) time.Duration {
	if _, ok := ctx.Deadline(); !ok || d.dropConn == nil {
		return limit
	}
	half, _ := lease.TryTimeout(ctx, time.Time{}, 0) // 0 once ctx's deadline has passed
	return max(min(limit, half), time.Millisecond)
}

// dropIfSilent drops connection number gen when err says that a renewal's
// request got no answer on it within timeout (answerWithin's), and returns
// errSilent then, and err otherwise: go-zookeeper reconnects at once, and
// the engine's retry, soon after, goes out on the new connection. The
// session survives: the server keeps it a session timeout after it last
// heard from it, and reopening it counts as hearing from it (see heard);
// the renewal counts from a request sent on the new connection, never from
// the one that got no answer.
func (d *zkDriver) dropIfSilent(gen uint64, timeout time.Duration, err error) error {
	if d.dropConn == nil || gen == 0 || !errors.Is(err, errNoAnswer) {
		return err
	}
	d.dropConn(gen)
	return fmt.Errorf("%w: no answer within %v, half of what was left of the lease: connection dropped for a new one", errSilent, timeout)
}

// awaitProvable waits until a request through the leader sent now proves
// that the leader heard of session sid's request sent at sent and answered
// at answered, or until ctx ends. It does not wait when that is known
// already, or when there is no such request.
func (d *zkDriver) awaitProvable(ctx context.Context, sid int64, sent, answered time.Time) error {
	if answered.IsZero() {
		return nil
	}
	if from, ok := d.heard.since(sid); ok && !from.Before(sent) {
		return nil
	}
	wait := time.Until(d.heard.provableAt(answered))
	if wait <= 0 {
		return nil
	}
	return ibackoff.Sleep(ctx, wait)
}

// connGen returns the number of the connection the Conn is on: it changes
// before go-zookeeper sends a request on a new connection. 0 means unknown
// (a conn given to New).
func (d *zkDriver) connGen() uint64 {
	if d.conns == nil {
		return 0
	}
	return d.conns.Load()
}

// sameConn returns conn, a connGen read before a request was sent, when
// the Conn is still on that connection after its reply came, so that the
// request was sent and answered on it; and 0 otherwise.
func (d *zkDriver) sameConn(conn uint64) uint64 {
	if conn != 0 && d.connGen() == conn {
		return conn
	}
	return 0
}

// watchProves reports whether the grant's watch proves its node unchanged
// up to a sync sent and answered on connection conn after the watch was set
// (0: none known): it is a data watch set by a read on that connection that
// found the node ours, and it has not fired (see above). A fired watch's
// event, if this call receives it first, is left for the watching
// goroutine.
func (g *grant) watchProves(conn uint64) bool {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.wch == nil || g.fired() {
		return false
	}
	return conn != 0 && g.wconn == conn
}

// fired reports whether wch has fired. g.wmu must be held, and wch set.
func (g *grant) fired() bool {
	select {
	case ev, ok := <-g.wch:
		if ok {
			g.taken = ev
		}
		return true
	default:
		return false
	}
}

// readNode proves the grant's node with a read: a getData with a watch,
// which replaces the grant's watch (the next batch relies on it), while the
// watch is set and has not fired; otherwise a plain exists, as the watching
// goroutine is setting the watch again, or no batch can rely on a watch
// (a conn given to New: go-zookeeper keeps every watch set until it fires,
// so one per renewal would pile up).
func (g *grant) readNode(ctx context.Context) error {
	d := g.d
	conn := d.connGen()
	g.wmu.Lock()
	old := g.wch
	rewatch := conn != 0 && old != nil && !g.fired()
	g.wmu.Unlock()
	var r getW
	var err error
	if rewatch {
		// getData with a watch on the node.
		r, err = call(ctx, nil, g.validity, func() (getW, error) {
			data, stat, ch, err := d.conn.GetW(g.path)
			return getW{stat, ch, data}, err
		})
	} else {
		// exists: the node is still there and still ours.
		r, err = call(ctx, nil, g.validity, func() (getW, error) {
			ok, stat, err := d.conn.Exists(g.path)
			if err == nil && !ok {
				err = zk.ErrNoNode
			}
			return getW{stat: stat}, err
		})
	}
	switch {
	case err == nil:
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%w: lock node %s is gone", driver.ErrNotHeld, g.nodeName())
	default:
		return g.renewErr(err)
	}
	if r.stat.EphemeralOwner != g.sid || d.conn.SessionID() != g.sid {
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, g.sessionGone())
	}
	if !g.ours(r.stat.Version, r.data, rewatch) {
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, g.overwritten())
	}
	if rewatch {
		g.wmu.Lock()
		if g.wch == old && !g.fired() {
			// The watching goroutine goes on waiting on old, and takes
			// the new watch when old fires. go-zookeeper fires every
			// channel of a node's data watches together, so an old data
			// watch fires with the new one; an old child watch on the
			// key node fires for our node's deletion and the session's
			// end, but not for a write of our node, which only the next
			// batch sees then (as with a child watch before).
			g.wch, g.wconn = r.ch, d.sameConn(conn)
		}
		g.wmu.Unlock()
	}
	return nil
}

var _ driver.BatchRenewer = (*zkDriver)(nil)
