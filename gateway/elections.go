package gateway

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"time"

	"github.com/dlockdev/dlock"
)

// A campaign is an acquire of kind "election" with a value: its lease is
// the term, released (resigned) and renewed as any lease. The routes here
// are what only an election has: its leader's value, read and followed.

// leaderReply is the state of an election: GET /v1/leader/{key} and the
// events of GET /v1/observe/{key}.
type leaderReply struct {
	Event     string          `json:"event,omitempty"` // streams only
	ID        string          `json:"id,omitempty"`    // streams only: the state's, for Last-Event-ID
	Key       string          `json:"key"`
	HasLeader bool            `json:"has_leader"`
	Value     string          `json:"value"`
	Token     uint64          `json:"token"`
	TokenStr  string          `json:"token_str"`
	Since     string          `json:"since,omitempty"`
	Metadata  *dlock.Metadata `json:"metadata,omitempty"`
}

func leaderOf(in dlock.LeaderInfo) leaderReply {
	r := leaderReply{Key: in.Key, HasLeader: in.HasLeader(), Value: in.Value, Token: in.Token, TokenStr: strconv.FormatUint(in.Token, 10)}
	if !in.Since.IsZero() {
		r.Since = stamp(in.Since)
	}
	if in.HasLeader() {
		md := in.Metadata
		r.Metadata = &md
	}
	return r
}

// stateID names an election's state: its leader's token and a hash of
// the value, so that a client resuming with Last-Event-ID is not sent
// again the state it has.
func stateID(in dlock.LeaderInfo) string {
	h := fnv.New64a()
	h.Write([]byte(in.Value))
	return fmt.Sprintf("%d-%016x", in.Token, h.Sum64())
}

// handleProclaim: POST /v1/leases/{id}/proclaim {"value": …} replaces the
// value a leader publishes.
func (g *Gateway) handleProclaim(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	var req struct {
		Value *string `json:"value"`
	}
	if err := decode(w, r, g.cfg.maxBody, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Value == nil {
		writeError(w, errorf(http.StatusBadRequest, CodeInvalidRequest, "value is missing"))
		return
	}
	h, p, err := g.lookup(w, r)
	switch {
	case err == nil && p != nil:
		err = errorf(http.StatusBadRequest, CodeInvalidRequest, "lease %s is a %v's, not an election's: nothing to proclaim", r.PathValue("id"), p.Kind)
	case err == nil && h.term == nil:
		err = errorf(http.StatusBadRequest, CodeInvalidRequest, "lease %s is a %v's, not an election's: nothing to proclaim", h.id, h.want.kind)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if perr := h.term.Proclaim(r.Context(), *req.Value); perr != nil {
		if errors.Is(perr, dlock.ErrNotHeld) {
			writeError(w, errorf(http.StatusGone, CodeLeaseLost, "lease %s: %v", h.id, perr))
			return
		}
		writeError(w, fromLibrary(perr))
		return
	}
	g.mu.Lock()
	rep := g.reply(h, recv, h.deadline)
	g.mu.Unlock()
	_ = writeJSON(w, http.StatusOK, rep)
}

// handleLeader: GET /v1/leader/{key...} says who leads the election.
func (g *Gateway) handleLeader(w http.ResponseWriter, r *http.Request) {
	if err := allow(r, ActionRead, r.PathValue("key")); err != nil {
		writeError(w, err)
		return
	}
	in, err := g.client.Election(r.PathValue("key")).Leader(r.Context())
	if errors.Is(err, dlock.ErrNoLeader) {
		writeError(w, errorf(http.StatusNotFound, CodeNoLeader, "%v", err))
		return
	}
	if err != nil {
		writeError(w, fromLibrary(err))
		return
	}
	_ = writeJSON(w, http.StatusOK, leaderOf(in))
}

// handleObserve: GET /v1/observe/{key...} streams the election's state,
// the current one first, then every change, as NDJSON or, for a client
// that accepts text/event-stream, as Server-Sent Events. A client that
// sends Last-Event-ID (or ?last_event_id=) with the id of the state it
// has is not sent that state again.
func (g *Gateway) handleObserve(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := validKey(key); err != nil {
		writeError(w, err)
		return
	}
	r, err := g.streamCaller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := allow(r, ActionRead, key); err != nil {
		writeError(w, err)
		return
	}
	end, err := g.openCounted(r, g.reserveObserverLocked, &g.observers)
	if err != nil {
		writeError(w, err)
		return
	}
	defer end()
	last := lastEventID(r)
	out := newEventStream(w, r)
	out.start()
	// The headers now: a resumed stream may have nothing to send yet.
	if !out.flush() {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel)
	defer stop()
	states := g.client.Election(key).Observe(ctx)
	tick := time.NewTicker(g.cfg.keepAlive)
	defer tick.Stop()
	for {
		select {
		case in, ok := <-states:
			if !ok {
				return
			}
			id := stateID(in)
			if id == last {
				continue
			}
			last = id
			ev := leaderOf(in)
			ev.Event, ev.ID = "leader", id
			if !out.send(ev.Event, ev.ID, ev) {
				return
			}
		case <-tick.C:
			if !out.keepalive(leaderReply{Event: "keepalive", Key: key}) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
