package gwtest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// observer is an open GET /v1/observe stream.
type observer struct{ *events }

func (e *env) observe(key string, header http.Header) *observer {
	e.T.Helper()
	return &observer{e.openEvents("/v1/observe/"+escapePath(key), header)}
}

// next returns the next leader event (skipping keep-alives) and, for SSE,
// its id line's value.
func (o *observer) next(t *testing.T) (map[string]any, string) {
	t.Helper()
	for {
		data, id, err := o.data()
		if err != nil {
			t.Fatalf("observe stream ended: %v", err)
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if ev["event"] == "leader" {
			return ev, id
		}
	}
}

// Server-Sent Events, resumed with Last-Event-ID: the state the client
// has is not sent again; the next one is.
func TestElection_observeSSEResumes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := e.Key("e")
	a := e.acquire(map[string]any{"key": key, "kind": "election", "value": "one"})
	e.want(a, http.StatusOK, "")
	sse := http.Header{"Accept": {"text/event-stream"}}
	first := e.observe(key, sse)
	ev, id := first.next(t)
	if ev["value"] != "one" || id == "" {
		t.Fatalf("first SSE event %v, id %q", ev, id)
	}
	first.resp.Body.Close()

	sse.Set("Last-Event-ID", id)
	again := e.observe(key, sse)
	e.want(e.do(ctx, http.MethodPost, "/v1/leases/"+a.Str("lease_id")+"/proclaim", map[string]any{"value": "two"}), http.StatusOK, "")
	if ev, id2 := again.next(t); ev["value"] != "two" || id2 == id {
		t.Fatalf("resumed stream's first event %v (id %q), want the new value, not the state of id %q", ev, id2, id)
	}
}

func TestElection_badInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l := e.acquire(map[string]any{"key": e.Key("lock")})
	e.want(l, http.StatusOK, "")
	e.want(e.do(ctx, http.MethodPost, "/v1/leases/"+l.Str("lease_id")+"/proclaim", map[string]any{"value": "x"}), http.StatusBadRequest, "invalid_request")
	e.want(e.acquire(map[string]any{"key": e.Key("v"), "value": "x"}), http.StatusBadRequest, "invalid_request")
	e.want(e.acquire(map[string]any{"key": e.Key("v"), "kind": "election", "value": strings.Repeat("v", 5000)}), http.StatusBadRequest, "invalid_request")
	e.want(e.acquire(map[string]any{"key": e.Key("lock"), "kind": "election"}), http.StatusConflict, "kind_mismatch")
	e.want(e.do(ctx, http.MethodGet, "/v1/leader/"+escapePath(e.Key("lock")), nil), http.StatusConflict, "kind_mismatch")
	if keys := e.redisKeys(); strings.Contains(keys, e.Key("v")) {
		t.Fatalf("refused campaigns left keys: %s", keys)
	}
}
