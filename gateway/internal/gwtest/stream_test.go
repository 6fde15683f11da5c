package gwtest

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/dlockdev/dlock/gateway"
)

// The watch and observe streams keep an idle stream alive each in its
// format: an SSE comment, which EventSource ignores, or an NDJSON line
// whose event is "keepalive" (observe's is a leader reply naming the key
// and no leader).
func TestStream_keepAlives(t *testing.T) {
	e := newEnv(t, gatewayKeepAlive(10*time.Millisecond))
	key := e.Key("e")
	e.want(e.acquire(map[string]any{"key": key, "kind": "election", "value": "one"}), http.StatusOK, "")
	for _, tc := range []struct {
		name, path string
		sse        bool
		want       string // the keep-alive's line
	}{
		{"watch/sse", "/v1/watch?prefix=" + escapeQuery(e.Prefix), true, ": keepalive"},
		{"watch/ndjson", "/v1/watch?prefix=" + escapeQuery(e.Prefix), false, `{"event":"keepalive"}`},
		{"observe/sse", "/v1/observe/" + escapePath(key), true, ": keepalive"},
		{"observe/ndjson", "/v1/observe/" + escapePath(key), false, `{"event":"keepalive","key":"` + key + `","has_leader":false,"value":"","token":0,"token_str":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantType := "application/x-ndjson"
			if tc.sse {
				req.Header.Set("Accept", "text/event-stream")
				wantType = "text/event-stream"
			}
			resp, err := e.Srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != wantType || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("got %d %v, want 200 %s nosniff", resp.StatusCode, resp.Header, wantType)
			}
			lines := bufio.NewScanner(resp.Body)
			for lines.Scan() {
				line := lines.Text()
				if line == tc.want {
					return
				}
				if !tc.sse && !json.Valid([]byte(line)) {
					t.Fatalf("NDJSON line %q is not JSON", line)
				}
			}
			t.Fatalf("no keep-alive %q before the stream ended: %v", tc.want, lines.Err())
		})
	}
}

// A watch counts against MaxWatches and an observe against MaxWaiters
// while open, and no longer once closed; a stream refused by either bound
// does not count against MaxStreamsPerClient.
func TestStream_countedWhileOpen(t *testing.T) {
	e := newEnv(t, gateway.MaxWatches(1), gateway.MaxWaiters(1), gateway.MaxStreamsPerClient(3))
	key := e.Key("e")
	e.want(e.acquire(map[string]any{"key": key, "kind": "election", "value": "one"}), http.StatusOK, "")
	watchPath := "/v1/watch?prefix=" + escapeQuery(e.Prefix)
	observePath := "/v1/observe/" + escapePath(key)

	w := e.watch("prefix="+escapeQuery(e.Prefix), nil)
	o := e.observe(key, nil)
	for range 3 {
		e.want(e.do(context.Background(), http.MethodGet, watchPath, nil), http.StatusTooManyRequests, gateway.CodeTooManyWatches)
		e.want(e.do(context.Background(), http.MethodGet, observePath, nil), http.StatusTooManyRequests, gateway.CodeTooManyWaiters)
	}
	// Two streams open, six refused: a third stream is still the client's.
	_ = e.hold(`{"key":"` + e.Key("h") + `"}`)

	w.resp.Body.Close()
	o.resp.Body.Close()
	e.eventually("a closed watch and observe no longer counted", func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for _, path := range []string{watchPath, observePath} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := e.Srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	})
}
