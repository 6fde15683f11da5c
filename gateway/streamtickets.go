package gateway

import (
	"net/http"
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

// handleStreamTicket: POST /v1/stream-tickets issues a single-use ticket
// that opens one event stream (GET /v1/watch?stream_ticket=…).
func (g *Gateway) handleStreamTicket(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	g.mu.Lock()
	for t, exp := range g.streamTickets {
		if recv.After(exp) {
			delete(g.streamTickets, t)
		}
	}
	if len(g.streamTickets) >= maxStreamTickets {
		g.mu.Unlock()
		writeError(w, errorf(http.StatusTooManyRequests, CodeTooManyWatches, "the gateway has its maximum of %d unused stream tickets", maxStreamTickets))
		return
	}
	t := randomID("s_")
	g.streamTickets[t] = recv.Add(StreamTicketTTL)
	g.mu.Unlock()
	_ = writeJSON(w, http.StatusOK, struct {
		Ticket     string `json:"stream_ticket"`
		ValidForMs int64  `json:"valid_for_ms"`
	}{t, StreamTicketTTL.Milliseconds()})
}

// useStreamTicket checks and spends the ticket a stream was opened with.
// Without auth, a stream needs no ticket; one it presents must be valid,
// so that a page using them is tested as it will run with auth.
func (g *Gateway) useStreamTicket(t string) *apiError {
	if t == "" {
		return nil
	}
	if !validID("s_", t) {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, "stream_ticket %q: want s_ and 32 hex digits", t)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	exp, ok := g.streamTickets[t]
	delete(g.streamTickets, t)
	if !ok || time.Now().After(exp) {
		return errorf(http.StatusNotFound, CodeTicketNotFound, "stream ticket %s is unknown, used or expired: fetch another", t)
	}
	return nil
}
