package gateway

import (
	"net/http"
	"slices"
	"time"
)

// A browser's EventSource cannot send an Authorization header, and a
// long-lived secret in a URL ends up in logs and histories. So a page
// asks for a stream ticket with an ordinary request (which carries its
// credentials, once the gateway checks any) and opens the stream with the
// ticket in the URL: it is good for one stream, for a short time.

// StreamTicketTTL is how long a stream ticket may wait to be used: long
// enough for a page to open its stream right after fetching it, short
// enough that one read from a log is useless.
const StreamTicketTTL = 30 * time.Second

// maxStreamTickets bounds the tickets issued and not yet used or expired.
const maxStreamTickets = 1000

// streamTicket is an unused stream ticket.
type streamTicket struct {
	expires   time.Time
	principal *Principal // who fetched it; nil without Authenticate
}

// handleStreamTicket: POST /v1/stream-tickets issues a single-use ticket
// that opens one event stream (GET /v1/watch?stream_ticket=… or GET
// /v1/observe/{key}?stream_ticket=…) with the permissions of the
// principal that fetched it.
func (g *Gateway) handleStreamTicket(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	p := caller(r)
	if p != nil && !slices.ContainsFunc(p.Permissions, func(pm Permission) bool { return pm.Action != ActionLock }) {
		writeError(w, errorf(http.StatusForbidden, CodeForbidden, "%s may read no key: a stream ticket opens only event streams, which need a permission read:PREFIX", p.Name))
		return
	}
	g.mu.Lock()
	for t, st := range g.streamTickets {
		if recv.After(st.expires) {
			delete(g.streamTickets, t)
		}
	}
	if len(g.streamTickets) >= maxStreamTickets {
		g.mu.Unlock()
		writeError(w, errorf(http.StatusTooManyRequests, CodeTooManyWatches, "the gateway has its maximum of %d unused stream tickets", maxStreamTickets))
		return
	}
	t := randomID("s_")
	g.streamTickets[t] = streamTicket{expires: recv.Add(StreamTicketTTL), principal: p}
	g.mu.Unlock()
	_ = writeJSON(w, http.StatusOK, struct {
		Ticket     string `json:"stream_ticket"`
		ValidForMs int64  `json:"valid_for_ms"`
	}{t, StreamTicketTTL.Milliseconds()})
}

// streamCaller checks and spends the ticket a stream was opened with, and
// returns the request with the ticket's principal as its caller. Without
// a ticket, the request is returned as it is (the middleware
// authenticated it). Without Authenticate, a stream needs no ticket; one
// it presents must be valid, so that a page using them is tested as it
// will run with auth.
func (g *Gateway) streamCaller(r *http.Request) (*http.Request, *apiError) {
	t := r.URL.Query().Get("stream_ticket")
	if t == "" {
		return r, nil
	}
	if !validID("s_", t) {
		return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "stream_ticket %q: want s_ and 32 hex digits", t)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.streamTickets[t]
	delete(g.streamTickets, t)
	if !ok || time.Now().After(st.expires) {
		return nil, errorf(http.StatusNotFound, CodeTicketNotFound, "stream ticket %s is unknown, used or expired: fetch another", t)
	}
	if st.principal != nil {
		r = withCaller(r, st.principal)
	}
	return r, nil
}
