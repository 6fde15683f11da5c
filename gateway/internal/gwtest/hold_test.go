package gwtest

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// stream is a streaming hold's open response.
type stream struct {
	resp  *http.Response
	lines *bufio.Scanner
	close func()
}

func (e *env) hold(body string) *stream {
	e.T.Helper()
	resp, stop := e.openStream(http.MethodPost, "/v1/hold", nil, strings.NewReader(body))
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		e.T.Fatalf("hold: %s, want application/x-ndjson", ct)
	}
	return &stream{resp: resp, lines: bufio.NewScanner(resp.Body), close: stop}
}

// grantedAfterClose closes s, which holds key, with a poll of key waiting
// on the backend, and fails the test unless the poll is then granted.
func (e *env) grantedAfterClose(s *stream, key string) {
	e.T.Helper()
	got := make(chan reply, 1)
	go func() {
		r, _ := e.try(context.Background(), http.MethodPost, "/v1/acquire", map[string]any{"key": key, "wait_ms": 30000})
		got <- r
	}()
	e.eventually("the poll waits on the backend", func() bool { return len(e.Info(key).Waiters) == 1 })
	s.close()
	select {
	case r := <-got:
		e.want(r, http.StatusOK, "")
	case <-time.After(waitFor):
		e.T.Fatal("the next waiter was not granted after the stream closed")
	}
}

// next reads the stream's next event.
func (s *stream) next(t *testing.T) map[string]any {
	t.Helper()
	if !s.lines.Scan() {
		t.Fatalf("stream ended: %v", s.lines.Err())
	}
	var ev map[string]any
	if err := json.Unmarshal(s.lines.Bytes(), &ev); err != nil {
		t.Fatalf("event %q: %v", s.lines.Text(), err)
	}
	return ev
}

// The streaming hold keeps the lease while the response is open, sends
// keep-alives, and releases on disconnect: the next waiter is granted.
func TestHold_releasedOnDisconnect(t *testing.T) {
	e := newEnv(t, gatewayKeepAlive(20*time.Millisecond))
	key := e.Key("k")
	s := e.hold(`{"key":"` + key + `","ttl_ms":60000}`)
	ev := s.next(t)
	if ev["event"] != "granted" || ev["token_str"] == "" || ev["streamed"] != true || ev["keepalive_ms"] != float64(20) {
		t.Fatalf("first event %v, want granted, with keepalive_ms 20", ev)
	}
	if ev := s.next(t); ev["event"] != "keepalive" || ev["valid_for_ms"].(float64) <= 0 {
		t.Fatalf("second event %v, want a keepalive", ev)
	}
	if in := e.Info(key); len(in.Holders) != 1 {
		t.Fatalf("backend holders while the stream is open: %+v", in.Holders)
	}
	id := ev["lease_id"].(string)
	e.want(e.do(context.Background(), http.MethodPost, "/v1/leases/"+id+"/renew", nil), http.StatusConflict, "lease_streamed")

	e.grantedAfterClose(s, key) // within waitFor: its TTL is 60s
}

// A streamed lease released by id ends its stream with a released event.
func TestHold_releasedByID(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	s := e.hold(`{"key":"` + key + `"}`)
	ev := s.next(t)
	e.want(e.do(context.Background(), http.MethodDelete, "/v1/leases/"+ev["lease_id"].(string), nil), http.StatusOK, "")
	if ev := s.next(t); ev["event"] != "released" {
		t.Fatalf("event %v, want released", ev)
	}
	if s.lines.Scan() {
		t.Fatalf("event after released: %s", s.lines.Text())
	}
	if in := e.Info(key); len(in.Holders) != 0 {
		t.Fatalf("backend holders after the release: %+v", in.Holders)
	}
}

// A lease the backend ends is a lost event on the stream.
func TestHold_lostEvent(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	s := e.hold(`{"key":"` + key + `","ttl_ms":300}`)
	s.next(t)
	// Behind the holder's back: the lock's Redis keys go.
	for _, k := range strings.Fields(e.redisKeys()) {
		e.redis("DEL", k)
	}
	for {
		ev := s.next(t)
		if ev["event"] == "keepalive" {
			continue
		}
		if ev["event"] != "lost" || ev["code"] != "lease_lost" {
			t.Fatalf("event %v, want lost", ev)
		}
		break
	}
}

// A hold that waits and is not granted in time is answered as an acquire
// is: 202 with a ticket, no stream.
func TestHold_waitEndsUngranted(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	e.want(e.acquire(map[string]any{"key": key, "ttl_ms": 60000}), http.StatusOK, "")
	r := e.do(context.Background(), http.MethodPost, "/v1/hold", map[string]any{"key": key, "wait_ms": 10})
	e.want(r, http.StatusAccepted, "")
	if r.Str("ticket") == "" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("202 %s (%s): want a JSON reply with a ticket", r.Raw, r.Header.Get("Content-Type"))
	}
}
