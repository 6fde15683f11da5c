package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// eventStream writes the events of a streaming reply (GET /v1/watch, GET
// /v1/observe), each flushed as it is written: as Server-Sent Events to a
// client that accepts text/event-stream, else as NDJSON, one JSON object a
// line. Its writes report whether the stream is still writable: false once
// the client has gone.
type eventStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	sse bool
}

// newEventStream returns the stream r asks for, SSE or NDJSON.
func newEventStream(w http.ResponseWriter, r *http.Request) *eventStream {
	return &eventStream{
		w:   w,
		rc:  http.NewResponseController(w),
		sse: strings.Contains(r.Header.Get("Accept"), "text/event-stream"),
	}
}

// lastEventID is the id of the last event a resuming client has: the
// Last-Event-ID header, or the last_event_id parameter from a client that
// cannot set headers.
func lastEventID(r *http.Request) string {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		return id
	}
	return r.URL.Query().Get("last_event_id")
}

// start writes the headers of the 200 reply, without flushing them.
func (s *eventStream) start() {
	if s.sse {
		s.w.Header().Set("Content-Type", "text/event-stream")
	} else {
		s.w.Header().Set("Content-Type", "application/x-ndjson")
	}
	s.w.Header().Set("X-Content-Type-Options", "nosniff")
	s.w.WriteHeader(http.StatusOK)
}

// flush sends what is written so far, the headers at least.
func (s *eventStream) flush() bool { return s.rc.Flush() == nil }

// send writes v as the event named event with id id; SSE gives both their
// own lines, while an NDJSON v carries them in its fields.
func (s *eventStream) send(event, id string, v any) bool {
	b, _ := json.Marshal(v) // cannot fail: the events hold strings, numbers and maps of strings
	var err error
	if s.sse {
		_, err = fmt.Fprintf(s.w, "id: %s\nevent: %s\ndata: %s\n\n", id, event, b)
	} else {
		_, err = s.w.Write(append(b, '\n'))
	}
	return err == nil && s.flush()
}

// keepalive writes a keep-alive: an SSE comment, which EventSource ignores
// and so keeps the last event's id, or v as an NDJSON line.
func (s *eventStream) keepalive(v any) bool {
	if s.sse {
		_, err := fmt.Fprint(s.w, ": keepalive\n\n")
		return err == nil && s.flush()
	}
	return s.send("", "", v)
}

// openCounted opens a stream of r's client (openStream) that reserveLocked
// admits and counts in *count, under g.mu, and returns the function that
// ends it and uncounts it.
func (g *Gateway) openCounted(r *http.Request, reserveLocked func() *apiError, count *int) (func(), *apiError) {
	end, err := g.openStream(r)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	err = reserveLocked()
	g.mu.Unlock()
	if err != nil {
		end()
		return nil, err
	}
	return func() {
		g.mu.Lock()
		*count--
		g.mu.Unlock()
		end()
	}, nil
}
