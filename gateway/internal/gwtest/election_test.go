package gwtest

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// observer is an open GET /v1/observe stream.
type observer struct {
	resp  *http.Response
	lines *bufio.Scanner
	sse   bool
}

func (e *env) observe(key string, header http.Header) *observer {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.URL+"/v1/observe/"+escapePath(key), nil)
	if err != nil {
		e.T.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := e.Srv.Client().Do(req)
	if err != nil {
		cancel()
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		e.T.Fatalf("observe: %d", resp.StatusCode)
	}
	return &observer{resp: resp, lines: bufio.NewScanner(resp.Body), sse: resp.Header.Get("Content-Type") == "text/event-stream"}
}

// next returns the next leader event (skipping keep-alives) and, for SSE,
// its id line's value.
func (o *observer) next(t *testing.T) (map[string]any, string) {
	t.Helper()
	id := ""
	for o.lines.Scan() {
		line := o.lines.Text()
		data := line
		if o.sse {
			switch {
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
				continue
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			default:
				continue
			}
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if ev["event"] == "leader" {
			return ev, id
		}
	}
	t.Fatalf("observe stream ended: %v", o.lines.Err())
	return nil, ""
}

func TestElection_campaignProclaimResign(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := e.Key("e")
	obs := e.observe(key, nil)
	if ev, _ := obs.next(t); ev["has_leader"] != false {
		t.Fatalf("first state %v, want nobody leading", ev)
	}

	a := e.acquire(map[string]any{"key": key, "kind": "election", "value": "10.0.0.1:80"})
	e.want(a, http.StatusOK, "")
	if a.Str("kind") != "election" {
		t.Fatalf("campaign: %s", a.Raw)
	}
	if ev, _ := obs.next(t); ev["value"] != "10.0.0.1:80" || ev["token_str"] != a.Str("token_str") {
		t.Fatalf("observed %v, want a's term", ev)
	}
	ld := e.do(ctx, http.MethodGet, "/v1/leader/"+escapePath(key), nil)
	e.want(ld, http.StatusOK, "")
	if ld.Str("value") != "10.0.0.1:80" || ld.Str("token_str") != a.Str("token_str") {
		t.Fatalf("leader: %s", ld.Raw)
	}

	b := e.acquire(map[string]any{"key": key, "kind": "election", "value": "b", "wait_ms": 10})
	e.want(b, http.StatusAccepted, "")

	e.want(e.do(ctx, http.MethodPost, "/v1/leases/"+a.Str("lease_id")+"/proclaim", map[string]any{"value": "10.0.0.1:81"}), http.StatusOK, "")
	if ev, _ := obs.next(t); ev["value"] != "10.0.0.1:81" {
		t.Fatalf("observed %v, want the proclaimed value", ev)
	}
	e.want(e.do(ctx, http.MethodPost, "/v1/leases/"+a.Str("lease_id")+"/resign", nil), http.StatusOK, "")
	e.want(e.do(ctx, http.MethodPost, "/v1/leases/"+a.Str("lease_id")+"/proclaim", map[string]any{"value": "x"}), http.StatusGone, "lease_released")

	bg := e.acquire(map[string]any{"key": key, "kind": "election", "value": "b", "ticket": b.Str("ticket"), "wait_ms": 30000})
	e.want(bg, http.StatusOK, "")
	for {
		ev, _ := obs.next(t)
		if ev["has_leader"] == false {
			continue // between the terms
		}
		if ev["value"] != "b" || ev["token_str"] != bg.Str("token_str") {
			t.Fatalf("observed %v, want b's term", ev)
		}
		break
	}
	e.want(e.do(ctx, http.MethodDelete, "/v1/leases/"+bg.Str("lease_id"), nil), http.StatusOK, "")
	e.want(e.do(ctx, http.MethodGet, "/v1/leader/"+escapePath(key), nil), http.StatusNotFound, "no_leader")
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
