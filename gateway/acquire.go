package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/gateway/internal/testhook"
)

// waiter is an acquire waiting in the backend's queue, on behalf of a
// long poll or, between polls, of its ticket.
type waiter struct {
	ticket string
	want   *want
	cancel context.CancelFunc // ends the backend acquire
	done   chan struct{}      // closed when the backend acquire returned

	// Guarded by Gateway.mu:
	lease     *dlock.Lease      // the grant, until a poll claims it
	term      *dlock.Leadership // an election's grant: lease's term
	err       error
	finished  bool        // the acquire returned: lease or err is set
	attached  bool        // a poll waits for it
	gone      bool        // claimed, or abandoned: out of the table
	expiry    *time.Timer // ends the ticket's place while detached
	expiresAt time.Time
}

// acquire takes what w asks for from the backend, waiting in its queue or
// not. An election's grant is a term too.
func (g *Gateway) acquire(ctx context.Context, w *want, wait bool) (*dlock.Lease, *dlock.Leadership, error) {
	if w.kind == dlock.KindElection {
		opts := w.opts
		if !wait {
			opts = append(opts[:len(opts):len(opts)], dlock.NoWait())
		}
		t, err := g.client.Election(w.key).Campaign(ctx, w.value, opts...)
		if err != nil {
			return nil, nil, err
		}
		return t.Lease(), t, nil
	}
	l, err := g.acquireLease(ctx, w, wait)
	return l, nil, err
}

// acquireLease is acquire of a lock, a permit or a read-write lease.
func (g *Gateway) acquireLease(ctx context.Context, w *want, wait bool) (*dlock.Lease, error) {
	c := g.client
	opts := w.opts
	switch w.kind {
	case dlock.KindSemaphore:
		s := c.Semaphore(w.key, w.limit)
		if wait {
			return s.Acquire(ctx, opts...)
		}
		return s.TryAcquire(ctx, opts...)
	case dlock.KindRWMutex:
		m := c.RWMutex(w.key)
		switch {
		case w.mode == dlock.Shared && wait:
			return m.RLock(ctx, opts...)
		case w.mode == dlock.Shared:
			return m.TryRLock(ctx, opts...)
		case wait:
			return m.Lock(ctx, opts...)
		}
		return m.TryLock(ctx, opts...)
	}
	if wait {
		return c.Lock(ctx, w.key, opts...)
	}
	return c.TryLock(ctx, w.key, opts...)
}

// reserve counts a lease slot (and a waiter) before anything is asked of
// the backend, so that the bounds hold without taking a grant only to
// refuse it.
func (g *Gateway) reserveLocked(waiting bool) *apiError {
	switch {
	case g.closed:
		return errorf(http.StatusServiceUnavailable, CodeClosing, "the gateway is closing")
	case g.nheld >= g.cfg.maxLeases:
		return errorf(http.StatusTooManyRequests, CodeTooManyLeases, "the gateway holds its maximum of %d leases and waits", g.cfg.maxLeases)
	case waiting && len(g.waiters)+g.observers >= g.cfg.maxWaiters:
		return errorf(http.StatusTooManyRequests, CodeTooManyWaiters, "the gateway has its maximum of %d waits and tickets", g.cfg.maxWaiters)
	}
	g.nheld++
	return nil
}

// reserveObserverLocked counts an election stream against MaxWaiters,
// with the waits and tickets. g.mu must be held.
func (g *Gateway) reserveObserverLocked() *apiError {
	switch {
	case g.closed:
		return errorf(http.StatusServiceUnavailable, CodeClosing, "the gateway is closing")
	case len(g.waiters)+g.observers >= g.cfg.maxWaiters:
		return errorf(http.StatusTooManyRequests, CodeTooManyWaiters, "the gateway has its maximum of %d waits, tickets and observers", g.cfg.maxWaiters)
	}
	g.observers++
	return nil
}

// startWaiter queues w on the backend, for a poll that waits for it.
func (g *Gateway) startWaiter(w *want) (*waiter, *apiError) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.reserveLocked(true); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(g.ctx)
	wt := &waiter{ticket: randomID("t_"), want: w, cancel: cancel, done: make(chan struct{}), attached: true}
	g.waiters[wt.ticket] = wt
	g.bg.Go(func() { g.run(ctx, wt) })
	return wt, nil
}

// run is the waiter's acquire. A grant that nobody claims any more is
// released here: a waiter abandoned before its grant landed.
func (g *Gateway) run(ctx context.Context, wt *waiter) {
	l, term, err := g.acquire(ctx, wt.want, true)
	if l != nil {
		testhook.Granted(wt.want.key)
	}
	g.mu.Lock()
	wt.lease, wt.term, wt.err, wt.finished = l, term, err, true
	close(wt.done)
	orphan := wt.gone && l != nil
	g.mu.Unlock()
	if orphan {
		g.cfg.log.Info("gateway: grant landed after its waiter went away: released", "key", wt.want.key, "token", l.Token())
		g.release(l)
	}
}

// claim takes a finished waiter's outcome for its poll. g.mu must be held.
func (g *Gateway) claimLocked(wt *waiter) outcome {
	g.dropLocked(wt)
	if wt.err != nil {
		g.nheld--
		return outcome{err: fromLibrary(wt.err)}
	}
	out := outcome{lease: wt.lease, term: wt.term}
	wt.lease = nil
	return out
}

// dropLocked takes wt out of the table; g.mu must be held.
func (g *Gateway) dropLocked(wt *waiter) {
	wt.gone = true
	delete(g.waiters, wt.ticket)
	if wt.expiry != nil {
		wt.expiry.Stop()
	}
	wt.cancel()
}

// abandon ends wt's place in the queue: its client went away, its ticket
// expired or was cancelled. A grant already landed is released; one that
// lands later is released by run.
func (g *Gateway) abandon(wt *waiter) {
	g.mu.Lock()
	if wt.gone {
		g.mu.Unlock()
		return
	}
	g.dropLocked(wt)
	g.nheld--
	l := wt.lease
	wt.lease = nil
	g.mu.Unlock()
	testhook.Abandoned(wt.want.key)
	if l != nil {
		g.cfg.log.Info("gateway: grant for a waiter gone away: released", "key", wt.want.key, "token", l.Token())
		g.release(l)
	}
}

// expireTicket abandons wt unless a poll reclaimed it meanwhile.
func (g *Gateway) expireTicket(wt *waiter) {
	g.mu.Lock()
	reclaimed := wt.attached
	g.mu.Unlock()
	if !reclaimed {
		g.abandon(wt)
	}
}

// attach gives the waiter of a ticket to a new poll.
func (g *Gateway) attach(ticket string, w *want) (*waiter, *apiError) {
	if !validID("t_", ticket) {
		return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "ticket %q is malformed: want the ticket of a 202 reply", ticket)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	wt, ok := g.waiters[ticket]
	switch {
	case !ok:
		return nil, errorf(http.StatusNotFound, CodeTicketNotFound, "no ticket %s on gateway instance %s: it expired (its place is kept %v), was cancelled, or was never issued", ticket, g.instance, g.cfg.ticketTTL)
	case !wt.want.same(w):
		return nil, errorf(http.StatusBadRequest, CodeTicketMismatch, "ticket %s waits for %v %q (%v), not for this request's", ticket, wt.want.kind, wt.want.key, wt.want.mode)
	case wt.attached:
		return nil, errorf(http.StatusConflict, CodeTicketInUse, "ticket %s is being polled by another request", ticket)
	}
	wt.attached = true
	wt.expiry.Stop()
	return wt, nil
}

// outcome is how a wait ended: a grant, an error, or a ticket.
type outcome struct {
	lease   *dlock.Lease
	term    *dlock.Leadership // an election's
	err     *apiError
	waiting *waitReply
}

// wait waits for wt at most d, or until the poll's client goes away.
func (g *Gateway) wait(r *http.Request, wt *waiter, d time.Duration, recv time.Time) outcome {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-wt.done:
	case <-timer.C:
	case <-r.Context().Done():
		g.abandon(wt)
		return outcome{err: errorf(499, "client_gone", "the client went away")}
	case <-g.ctx.Done():
		g.abandon(wt)
		return outcome{err: errorf(http.StatusServiceUnavailable, CodeClosing, "the gateway is closing")}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if wt.gone {
		// Close abandoned it.
		return outcome{err: errorf(http.StatusServiceUnavailable, CodeClosing, "the gateway is closing")}
	}
	if wt.finished {
		return g.claimLocked(wt)
	}
	// Keep the place for a new poll with the ticket.
	wt.attached = false
	wt.expiresAt = time.Now().Add(g.cfg.ticketTTL)
	if wt.expiry == nil {
		wt.expiry = time.AfterFunc(g.cfg.ticketTTL, func() { g.expireTicket(wt) })
	} else {
		wt.expiry.Reset(g.cfg.ticketTTL)
	}
	return outcome{waiting: &waitReply{
		Ticket:           wt.ticket,
		TicketValidForMs: g.cfg.ticketTTL.Milliseconds(),
		Key:              wt.want.key,
		ReceivedAt:       stamp(recv),
	}}
}

// obtain runs an acquire request to its outcome.
func (g *Gateway) obtain(w http.ResponseWriter, r *http.Request, recv time.Time) (*want, outcome) {
	var req acquireRequest
	if err := decode(w, r, g.cfg.maxBody, &req); err != nil {
		return nil, outcome{err: err}
	}
	wnt, err := req.parse(g.cfg.maxWait)
	if err != nil {
		return nil, outcome{err: err}
	}
	if err := allow(r, ActionLock, wnt.key); err != nil {
		return nil, outcome{err: err}
	}
	if req.Ticket != "" {
		wt, err := g.attach(req.Ticket, wnt)
		if err != nil {
			return nil, outcome{err: err}
		}
		return wt.want, g.wait(r, wt, wnt.wait, recv)
	}
	if wnt.wait == 0 {
		g.mu.Lock()
		err := g.reserveLocked(false)
		g.mu.Unlock()
		if err != nil {
			return nil, outcome{err: err}
		}
		l, term, aerr := g.acquire(r.Context(), wnt, false)
		if aerr != nil {
			g.mu.Lock()
			g.nheld--
			g.mu.Unlock()
			return nil, outcome{err: fromLibrary(aerr)}
		}
		return wnt, outcome{lease: l, term: term}
	}
	wt, aerr := g.startWaiter(wnt)
	if aerr != nil {
		return nil, outcome{err: aerr}
	}
	return wnt, g.wait(r, wt, wnt.wait, recv)
}

// obtainGrant is obtain that answers the request itself, with the error
// or the 202 of a wait that ended ungranted, unless a lease was granted.
func (g *Gateway) obtainGrant(w http.ResponseWriter, r *http.Request, recv time.Time) (*want, outcome, bool) {
	wnt, out := g.obtain(w, r, recv)
	switch {
	case out.err != nil:
		writeError(w, out.err)
		return nil, out, false
	case out.waiting != nil:
		_ = writeJSON(w, http.StatusAccepted, out.waiting)
		return nil, out, false
	}
	return wnt, out, true
}

// handleAcquire: POST /v1/acquire.
func (g *Gateway) handleAcquire(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	wnt, out, ok := g.obtainGrant(w, r, recv)
	if !ok {
		return
	}
	if p, until := g.handOff(out.lease, out.term); p != nil {
		w.Header().Set(StickyHeader, "false")
		if r.Context().Err() != nil {
			// The client went away as the grant landed: nobody would
			// renew or release it.
			g.releaseRef(p)
			return
		}
		if writeJSON(w, http.StatusOK, g.portableReply(g.leaseID(p), p, recv, until)) != nil || http.NewResponseController(w).Flush() != nil {
			g.releaseRef(p)
		}
		return
	}
	w.Header().Set(StickyHeader, "true")
	granted := time.Now()
	h, err := g.register(out.lease, out.term, wnt, granted, false)
	if err != nil {
		g.release(out.lease)
		writeError(w, err)
		return
	}
	if r.Context().Err() != nil {
		// The client went away as the grant landed: nobody would renew
		// or release it.
		g.abandonLease(h)
		return
	}
	g.mu.Lock()
	rep := g.reply(h, recv, h.deadline)
	g.mu.Unlock()
	if writeJSON(w, http.StatusOK, rep) != nil || http.NewResponseController(w).Flush() != nil {
		g.abandonLease(h)
	}
}

// abandonLease releases a granted lease whose client cannot have learnt
// of it.
func (g *Gateway) abandonLease(h *held) {
	if g.take(h, CodeLeaseReleased) {
		g.cfg.log.Info("gateway: client gone as its grant landed: released", "key", h.want.key, "token", h.lease.Token())
		g.release(h.lease)
	}
}

// endStream sends the last event of a stream whose lease was taken out of
// the table by a release or by Close.
func (g *Gateway) endStream(h *held, send func(any) bool) {
	g.mu.Lock()
	code := h.endCode
	g.mu.Unlock()
	if code == CodeLeaseReleased {
		send(endEvent{Event: "released", LeaseID: h.id})
		return
	}
	send(endEvent{Event: "lost", LeaseID: h.id, Code: code, Message: "the gateway is closing: the lease was released"})
}

// handleCancelTicket: DELETE /v1/tickets/{ticket} leaves the queue.
func (g *Gateway) handleCancelTicket(w http.ResponseWriter, r *http.Request) {
	ticket := r.PathValue("ticket")
	if !validID("t_", ticket) {
		writeError(w, errorf(http.StatusBadRequest, CodeInvalidRequest, "ticket %q is malformed: want the ticket of a 202 reply", ticket))
		return
	}
	g.mu.Lock()
	wt, ok := g.waiters[ticket]
	g.mu.Unlock()
	if !ok {
		writeError(w, errorf(http.StatusNotFound, CodeTicketNotFound, "no ticket %s on gateway instance %s", ticket, g.instance))
		return
	}
	if err := allow(r, ActionLock, wt.want.key); err != nil {
		writeError(w, err)
		return
	}
	g.abandon(wt)
	_ = writeJSON(w, http.StatusOK, struct {
		Ticket    string `json:"ticket"`
		Cancelled bool   `json:"cancelled"`
	}{ticket, true})
}

// handleHold: POST /v1/hold acquires as /v1/acquire does, and on a grant
// answers with a stream of NDJSON events that holds the lease for as long
// as it stays open.
func (g *Gateway) handleHold(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	end, serr := g.openStream(r)
	if serr != nil {
		writeError(w, serr)
		return
	}
	defer end()
	wnt, out, ok := g.obtainGrant(w, r, recv)
	if !ok {
		return
	}
	h, err := g.register(out.lease, out.term, wnt, time.Now(), true)
	if err != nil {
		g.release(out.lease)
		writeError(w, err)
		return
	}
	l := h.lease
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(v any) bool {
		return enc.Encode(v) == nil && rc.Flush() == nil
	}
	every := min(g.cfg.keepAlive, l.TTL()/3)
	event := func(name string, at time.Time) leaseReply {
		rep := g.reply(h, at, l.Deadline())
		rep.Event, rep.KeepAliveMs = name, every.Milliseconds()
		return rep
	}
	w.Header().Set(StickyHeader, "true") // its stream holds it
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(every)
	defer tick.Stop()
	ok = r.Context().Err() == nil && send(event("granted", recv))
	for ok {
		select {
		case <-r.Context().Done():
			ok = false
		case <-l.Done():
			if g.take(h, CodeLeaseLost) {
				send(endEvent{Event: "lost", LeaseID: h.id, Code: CodeLeaseLost, Message: l.Err().Error()})
				return
			}
			// Released by id or by Close, whose Unlock closed Done
			// before this stream saw its end.
			g.endStream(h, send)
			return
		case <-h.stream:
			g.endStream(h, send)
			return
		case <-tick.C:
			ok = send(event("keepalive", time.Now()))
		}
	}
	// The client went away or its connection broke: the lease ends with
	// its stream.
	if g.take(h, CodeLeaseReleased) {
		g.release(l)
	}
}
