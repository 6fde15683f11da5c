package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/dlockdev/dlock"
)

// held is a lease the gateway holds for a client.
type held struct {
	id    string
	lease *dlock.Lease
	term  *dlock.Leadership // an election's: for Proclaim
	want  *want
	// deadline is when the gateway gives the lease up unless renewed
	// (explicit leases); guarded by Gateway.mu.
	deadline time.Time
	timer    *time.Timer // fires at deadline; nil for a streamed lease
	// stream, for a streamed lease, is closed when the lease leaves the
	// table other than by its stream: endCode then says why. Guarded by
	// Gateway.mu.
	stream  chan struct{}
	endCode string
}

// register puts a granted lease in the table, in the slot its acquire
// reserved. An explicit lease is given up at granted plus its TTL unless
// renewed; a streamed one lives as long as its stream.
func (g *Gateway) register(l *dlock.Lease, term *dlock.Leadership, w *want, granted time.Time, streamed bool) (*held, *apiError) {
	h := &held{id: g.leaseID(&leaseRef{Instance: g.instance, Nonce: randomID("")}), lease: l, term: term, want: w}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.nheld--
		return nil, errorf(http.StatusServiceUnavailable, CodeClosing, "the gateway is closing")
	}
	if streamed {
		h.stream = make(chan struct{})
	} else {
		h.deadline = granted.Add(l.TTL())
		h.timer = time.AfterFunc(time.Until(h.deadline), func() { g.expire(h) })
	}
	g.leases[h.id] = h
	return h, nil
}

// endLocked takes h out of the table, remembering why under its id, and
// returns it for the caller to release. g.mu must be held.
func (g *Gateway) endLocked(id string, h *held, code string) *held {
	delete(g.leases, id)
	g.nheld--
	if h.timer != nil {
		h.timer.Stop()
	}
	if h.stream != nil {
		h.endCode = code
		close(h.stream)
	}
	if len(g.endedQ) >= maxEnded {
		delete(g.ended, g.endedQ[0])
		g.endedQ = g.endedQ[1:]
	}
	g.ended[id] = code
	g.endedQ = append(g.endedQ, id)
	return h
}

// take ends h with code if it is still in the table, and reports whether
// it was: the caller then owns its release.
func (g *Gateway) take(h *held, code string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leases[h.id] != h {
		return false
	}
	g.endLocked(h.id, h, code)
	return true
}

// expire gives h up when its client did not renew it in time.
func (g *Gateway) expire(h *held) {
	g.mu.Lock()
	if g.leases[h.id] != h || time.Now().Before(h.deadline) {
		// Released meanwhile, or renewed as the timer fired.
		g.mu.Unlock()
		return
	}
	g.endLocked(h.id, h, CodeLeaseExpired)
	g.mu.Unlock()
	g.cfg.log.Info("gateway: lease not renewed within its TTL: released", "key", h.want.key, "token", h.lease.Token())
	g.release(h.lease)
}

// release releases l in the background, waiting at most its TTL: after
// that the backend frees the key by itself, since nobody renews it.
func (g *Gateway) release(l *dlock.Lease) {
	g.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.TTL())
		defer cancel()
		if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			g.cfg.log.Warn("gateway: release not confirmed; the backend frees the key when its TTL runs out", "key", l.Key(), "err", err)
		}
	})
}

// lookupLocked finds the sticky lease id names (parseLeaseID checked it),
// or the reply for an id that is unknown or ended. A lease the backend lost
// is ended here, so that every later request says lease_lost too. g.mu
// must be held.
func (g *Gateway) lookupLocked(r *http.Request, id string) (*held, *apiError) {
	h, ok := g.leases[id]
	if !ok {
		return nil, g.goneLocked(id)
	}
	// The id is the capability, but only for a principal allowed on the
	// key: a leaked id is no use to another.
	if err := allow(r, ActionLock, h.want.key); err != nil {
		return nil, err
	}
	select {
	case <-h.lease.Done():
		g.endLocked(id, h, CodeLeaseLost)
		return nil, errorf(http.StatusGone, CodeLeaseLost, "lease %s was lost: %v", id, h.lease.Err())
	default:
	}
	return h, nil
}

// endedLocked is the reply for a lease id this instance saw end, or nil.
// g.mu must be held.
func (g *Gateway) endedLocked(id string) *apiError {
	switch code := g.ended[id]; code {
	case CodeLeaseExpired:
		return errorf(http.StatusGone, code, "lease %s was not renewed within its TTL: the gateway released it", id)
	case CodeLeaseReleased:
		return errorf(http.StatusGone, code, "lease %s was released already", id)
	case CodeLeaseLost:
		return errorf(http.StatusGone, code, "lease %s was lost: the backend ended it", id)
	case CodeClosing:
		return errorf(http.StatusGone, CodeLeaseReleased, "lease %s was released when the gateway closed", id)
	}
	return nil
}

// goneLocked is the reply for a sticky lease id not in the table. g.mu
// must be held.
func (g *Gateway) goneLocked(id string) *apiError {
	if err := g.endedLocked(id); err != nil {
		return err
	}
	return errorf(http.StatusNotFound, CodeLeaseNotFound, "no lease %s on gateway instance %s", id, g.instance)
}

// lookup resolves the request's lease id: a portable lease (p, and h nil),
// or a sticky one of this instance (h). It sets StickyHeader.
func (g *Gateway) lookup(w http.ResponseWriter, r *http.Request) (h *held, p *leaseRef, err *apiError) {
	id := r.PathValue("id")
	p, err = g.parseLeaseID(id)
	if err != nil {
		if err.code == CodeWrongInstance {
			w.Header().Set(StickyHeader, "true")
		}
		return nil, nil, err
	}
	if p.portable() {
		w.Header().Set(StickyHeader, "false")
		return nil, p, nil
	}
	w.Header().Set(StickyHeader, "true")
	g.mu.Lock()
	defer g.mu.Unlock()
	h, err = g.lookupLocked(r, id)
	return h, nil, err
}

func (g *Gateway) reply(h *held, recv time.Time, until time.Time) leaseReply {
	w := h.want
	r := leaseReply{
		LeaseID:    h.id,
		Key:        w.key,
		Kind:       w.kind.String(),
		Mode:       w.mode.String(),
		Token:      h.lease.Token(),
		TokenStr:   strconv.FormatUint(h.lease.Token(), 10),
		TTLMs:      h.lease.TTL().Milliseconds(),
		ValidForMs: validFor(h.lease, until, recv).Milliseconds(),
		ReceivedAt: stamp(recv),
		Streamed:   h.stream != nil,
	}
	if w.kind == dlock.KindSemaphore {
		r.Limit = w.limit
	}
	return r
}

// serveLease serves a request on a lease id, given its receipt: lookup
// resolves the id, then portable serves a portable lease the caller may
// use (portableCheck), and sticky a lease of this instance's table.
func (g *Gateway) serveLease(w http.ResponseWriter, r *http.Request,
	portable func(http.ResponseWriter, *http.Request, string, *leaseRef, time.Time),
	sticky func(http.ResponseWriter, *http.Request, *held, time.Time)) {
	recv := time.Now()
	h, p, err := g.lookup(w, r)
	if err == nil && p != nil {
		id := r.PathValue("id")
		if err := g.portableCheck(r, id, p); err != nil {
			writeError(w, err)
			return
		}
		portable(w, r, id, p, recv)
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	sticky(w, r, h, recv)
}

// currentLocked is nil while h is in the table, else the reply for its id:
// the lease ended since its lookup. g.mu must be held.
func (g *Gateway) currentLocked(h *held) *apiError {
	if g.leases[h.id] != h {
		return g.goneLocked(h.id)
	}
	return nil
}

// handleRenew: POST /v1/leases/{id}/renew moves the lease's deadline to
// the request's receipt plus its TTL.
func (g *Gateway) handleRenew(w http.ResponseWriter, r *http.Request) {
	g.serveLease(w, r, g.renewPortable, g.renewSticky)
}

func (g *Gateway) renewSticky(w http.ResponseWriter, _ *http.Request, h *held, recv time.Time) {
	if h.stream != nil {
		writeError(w, errorf(http.StatusConflict, CodeLeaseStreamed, "lease %s is held by its stream, which keeps it alive", h.id))
		return
	}
	g.mu.Lock()
	if err := g.currentLocked(h); err != nil {
		g.mu.Unlock()
		writeError(w, err)
		return
	}
	h.deadline = recv.Add(h.lease.TTL())
	h.timer.Reset(time.Until(h.deadline))
	rep := g.reply(h, recv, h.deadline)
	g.mu.Unlock()
	_ = writeJSON(w, http.StatusOK, rep)
}

// handleLease: GET /v1/leases/{id} says how long the lease is valid,
// without renewing it.
func (g *Gateway) handleLease(w http.ResponseWriter, r *http.Request) {
	g.serveLease(w, r, g.inspectPortable, g.inspectSticky)
}

func (g *Gateway) inspectSticky(w http.ResponseWriter, _ *http.Request, h *held, recv time.Time) {
	g.mu.Lock()
	until := h.deadline
	if h.stream != nil {
		until = h.lease.Deadline()
	}
	rep := g.reply(h, recv, until)
	g.mu.Unlock()
	_ = writeJSON(w, http.StatusOK, rep)
}

// handleRelease: DELETE /v1/leases/{id} (or POST …/release) releases
// the lease and hands the key to the next waiter.
func (g *Gateway) handleRelease(w http.ResponseWriter, r *http.Request) {
	g.serveLease(w, r, g.releasePortable, g.releaseSticky)
}

func (g *Gateway) releaseSticky(w http.ResponseWriter, _ *http.Request, h *held, recv time.Time) {
	g.mu.Lock()
	if err := g.currentLocked(h); err != nil {
		g.mu.Unlock()
		writeError(w, err)
		return
	}
	g.endLocked(h.id, h, CodeLeaseReleased)
	g.mu.Unlock()
	// Not the request's context: a client that goes away mid-release
	// must not leave the key held until its TTL runs out.
	ctx, cancel := context.WithTimeout(context.Background(), h.lease.TTL())
	defer cancel()
	if err := h.lease.Unlock(ctx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			writeError(w, errorf(http.StatusGone, CodeLeaseLost, "lease %s was lost before its release (work under it may have overlapped with another holder's): %v", h.id, err))
			return
		}
		writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, "release of lease %s not confirmed; the backend frees the key when its TTL runs out: %v", h.id, err))
		return
	}
	writeReleased(w, h.id, recv)
}

func writeReleased(w http.ResponseWriter, id string, recv time.Time) {
	_ = writeJSON(w, http.StatusOK, struct {
		LeaseID    string `json:"lease_id"`
		Released   bool   `json:"released"`
		ReceivedAt string `json:"received_at"`
	}{id, true, stamp(recv)})
}
