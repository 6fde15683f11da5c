package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/handoff"
	"github.com/dlockdev/dlock/internal/lease"
)

// An explicit lease on a backend that keeps a grant's state on the server
// (driver.Reattacher: Redis) is portable: the gateway hands its grant off
// (handoff.Detach) and renews nothing by itself. The server is the truth:
// each renew the client sends is one renewal on the server, through any
// instance, and a client that stops renewing loses the lease when the
// server's TTL runs out, whatever became of the instances. The lease id
// carries the grant's reference, signed (leaseid.go).

// handOff makes l, an explicit lease just granted, portable if its backend
// allows, and returns what its id says and until when it is valid; nil
// when it stays sticky. The slot reserved for it is given back: no
// instance holds it.
func (g *Gateway) handOff(l *dlock.Lease, term *dlock.Leadership) (*leaseRef, time.Time) {
	if term != nil {
		// An election's term publishes through its Leadership, which
		// lives here.
		return nil, time.Time{}
	}
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		// register refuses it, and releases it.
		return nil, time.Time{}
	}
	until := l.Deadline()
	ref, ok := handoff.Detach(context.Background(), l)
	if !ok {
		return nil, time.Time{}
	}
	g.mu.Lock()
	g.nheld--
	g.mu.Unlock()
	return portableRef(g.instance, ref), until
}

// reattach returns the grant p names, through the gateway's Client.
func (g *Gateway) reattach(p *leaseRef) (driver.Grant, *apiError) {
	gr, ok, err := handoff.Reattach(g.client, p.grantRef())
	switch {
	case !ok:
		return nil, errorf(http.StatusMisdirectedRequest, CodeWrongInstance, "lease of gateway instance %s is renewed by reference, which this instance's backend cannot do: send its requests to an instance in front of the backend that granted it", p.Instance)
	case err != nil:
		return nil, errorf(http.StatusNotFound, CodeLeaseNotFound, "lease of gateway instance %s names no grant of this backend: %v", p.Instance, err)
	}
	return gr, nil
}

// safeFor is how long a grant renewed by a request sent at some moment
// stays valid after that moment, by this clock: its TTL less what the
// library gives up to clock drift (package dlock's lease engine).
func safeFor(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*lease.DriftFactor) - lease.DriftMargin
}

func (g *Gateway) portableReply(id string, p *leaseRef, recv, until time.Time) leaseReply {
	r := leaseReply{
		LeaseID:    id,
		Key:        p.Key,
		Kind:       p.Kind.String(),
		Mode:       p.Mode.String(),
		Token:      p.Token,
		TokenStr:   strconv.FormatUint(p.Token, 10),
		TTLMs:      p.TTLMs,
		ValidForMs: max(0, until.Sub(recv)).Milliseconds(),
		ReceivedAt: stamp(recv),
	}
	if p.Kind == dlock.KindSemaphore {
		r.Limit = p.Limit
	}
	return r
}

// portableEnded is the reply for a portable lease this instance released,
// or nil.
func (g *Gateway) portableEnded(id string) *apiError {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.endedLocked(id)
}

// remember records that a portable lease was released here, to answer a
// replay with lease_released.
func (g *Gateway) remember(id, code string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.endedQ) >= maxEnded {
		delete(g.ended, g.endedQ[0])
		g.endedQ = g.endedQ[1:]
	}
	g.ended[id] = code
	g.endedQ = append(g.endedQ, id)
}

// notHeld is the reply to a renewal or inspection of a portable lease that
// the backend no longer holds. The server cannot tell an expiry from a
// deletion: both are lease_expired.
func notHeld(id string, err error) *apiError {
	return errorf(http.StatusGone, CodeLeaseExpired, "lease %s is not held on the backend any more: it was not renewed within its TTL, or the backend ended it: %v", id, err)
}

// renewPortable renews p on the backend: one renewal, from the request's
// receipt. The reply says the lease is valid only when the server said it
// extended it.
func (g *Gateway) renewPortable(w http.ResponseWriter, r *http.Request, id string, p *leaseRef, recv time.Time) {
	gr, aerr := g.reattach(p)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ttl := time.Duration(p.TTLMs) * time.Millisecond
	// A renewal not confirmed within the TTL is no use: the lease has
	// ended by then unless another renewal came through.
	ctx, cancel := context.WithTimeout(r.Context(), ttl)
	defer cancel()
	sent := time.Now()
	if err := gr.Renew(ctx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			writeError(w, notHeld(id, err))
			return
		}
		writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, "renewal of lease %s not confirmed: %v", id, err))
		return
	}
	_ = writeJSON(w, http.StatusOK, g.portableReply(id, p, recv, sent.Add(safeFor(ttl))))
}

// inspectPortable says how long the backend keeps p, without renewing it.
func (g *Gateway) inspectPortable(w http.ResponseWriter, r *http.Request, id string, p *leaseRef, recv time.Time) {
	sent := time.Now()
	in, err := g.client.Inspect(r.Context(), p.Key)
	if err != nil {
		writeError(w, fromLibrary(err))
		return
	}
	for _, e := range in.Holders {
		if e.Token != p.Token {
			continue
		}
		// A backend that cannot tell the time left leaves nothing known.
		until := recv
		if e.TTL >= 0 {
			until = sent.Add(safeFor(e.TTL))
		}
		_ = writeJSON(w, http.StatusOK, g.portableReply(id, p, recv, until))
		return
	}
	writeError(w, notHeld(id, errors.New("no holder with its token")))
}

// releasePortable releases p on the backend.
func (g *Gateway) releasePortable(w http.ResponseWriter, r *http.Request, id string, p *leaseRef, recv time.Time) {
	gr, aerr := g.reattach(p)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// Not the request's context: a client that goes away mid-release
	// must not leave the key held until its TTL runs out.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(p.TTLMs)*time.Millisecond)
	defer cancel()
	if err := gr.Release(ctx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			writeError(w, errorf(http.StatusGone, CodeLeaseLost, "lease %s was not held on the backend at its release: it expired there or the backend ended it (work under it may have overlapped with another holder's): %v", id, err))
			return
		}
		writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, "release of lease %s not confirmed; the backend frees the key when its TTL runs out: %v", id, err))
		return
	}
	g.remember(id, CodeLeaseReleased)
	writeReleased(w, id, recv)
}

// portableCheck refuses a request on p that its principal may not make,
// or on a lease released through this instance.
func (g *Gateway) portableCheck(r *http.Request, id string, p *leaseRef) *apiError {
	// The id is the capability, but only for a principal allowed on the
	// key: a leaked id is no use to another.
	if err := allow(r, ActionLock, p.Key); err != nil {
		return err
	}
	return g.portableEnded(id)
}

// releaseRef releases p in the background, for a grant whose client cannot
// have learnt of it, waiting at most its TTL.
func (g *Gateway) releaseRef(p *leaseRef) {
	gr, err := g.reattach(p)
	if err != nil {
		return
	}
	g.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(p.TTLMs)*time.Millisecond)
		defer cancel()
		if err := gr.Release(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			g.cfg.log.Warn("gateway: release not confirmed; the backend frees the key when its TTL runs out", "key", p.Key, "err", err)
		}
	})
}
