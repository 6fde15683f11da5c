package gwtest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/gateway"
)

// events is an open watch or observe stream, NDJSON or SSE.
type events struct {
	resp  *http.Response
	lines *bufio.Scanner
	sse   bool
}

// openStream sends a request whose reply is a stream, and fails the test
// unless it is a 200. The stream is closed when the test ends, or by the
// function returned.
func (e *env) openStream(method, path string, header http.Header, body io.Reader) (*http.Response, func()) {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, method, e.Srv.URL+path, body)
	if err != nil {
		cancel()
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
	stop := func() { cancel(); resp.Body.Close() }
	e.T.Cleanup(stop)
	if resp.StatusCode != http.StatusOK {
		e.T.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
	return resp, stop
}

// openEvents opens the stream GET path.
func (e *env) openEvents(path string, header http.Header) *events {
	e.T.Helper()
	resp, _ := e.openStream(http.MethodGet, path, header, nil)
	return &events{resp: resp, lines: bufio.NewScanner(resp.Body), sse: resp.Header.Get("Content-Type") == "text/event-stream"}
}

// data reads the next event's data: an NDJSON line, or an SSE event's data
// line, with the value of the id line before it. It skips SSE comments.
func (s *events) data() (data, id string, err error) {
	for s.lines.Scan() {
		line := s.lines.Text()
		if !s.sse {
			return line, "", nil
		}
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			return strings.TrimPrefix(line, "data: "), id, nil
		}
	}
	if err := s.lines.Err(); err != nil {
		return "", "", err
	}
	return "", "", io.EOF
}

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
