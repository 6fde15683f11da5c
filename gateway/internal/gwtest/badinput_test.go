package gwtest

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
)

// Bad input gets a 4xx naming the problem, and nothing reaches the
// backend.
func TestBadInput_refusedLeavingNothing(t *testing.T) {
	e := newEnv(t, gatewayMaxBody(4096))
	key := e.Key("k")
	q := func(s string) string { return `"` + s + `"` }
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"malformed JSON", "POST", "/v1/acquire", `{"key":`, 400, "malformed_json"},
		{"not an object", "POST", "/v1/acquire", `["k"]`, 400, "malformed_json"},
		{"empty body", "POST", "/v1/acquire", ``, 400, "malformed_json"},
		{"two objects", "POST", "/v1/acquire", `{"key":` + q(key) + `} {}`, 400, "malformed_json"},
		{"unknown field", "POST", "/v1/acquire", `{"key":` + q(key) + `,"tll_ms":5}`, 400, "malformed_json"},
		{"wrong type", "POST", "/v1/acquire", `{"key":` + q(key) + `,"ttl_ms":"5s"}`, 400, "malformed_json"},
		{"oversize body", "POST", "/v1/acquire", `{"key":` + q(key) + `,"metadata":{"note":"` + strings.Repeat("x", 5000) + `"}}`, 413, "body_too_large"},
		{"empty key", "POST", "/v1/acquire", `{"key":""}`, 400, "invalid_key"},
		{"control character", "POST", "/v1/acquire", `{"key":` + q(key+`\u0001`) + `}`, 400, "invalid_key"},
		{"long key", "POST", "/v1/acquire", `{"key":` + q(key+strings.Repeat("k", 300)) + `}`, 400, "invalid_key"},
		{"unknown kind", "POST", "/v1/acquire", `{"key":` + q(key) + `,"kind":"mutex"}`, 400, "invalid_request"},
		{"semaphore without limit", "POST", "/v1/acquire", `{"key":` + q(key) + `,"kind":"semaphore"}`, 400, "invalid_request"},
		{"limit on a lock", "POST", "/v1/acquire", `{"key":` + q(key) + `,"limit":3}`, 400, "invalid_request"},
		{"shared lock", "POST", "/v1/acquire", `{"key":` + q(key) + `,"mode":"shared"}`, 400, "invalid_request"},
		{"ttl too short", "POST", "/v1/acquire", `{"key":` + q(key) + `,"ttl_ms":5}`, 400, "invalid_request"},
		{"ttl too long", "POST", "/v1/acquire", `{"key":` + q(key) + `,"ttl_ms":999999999999999}`, 400, "invalid_request"},
		{"negative wait", "POST", "/v1/acquire", `{"key":` + q(key) + `,"wait_ms":-1}`, 400, "invalid_request"},
		{"note too long", "POST", "/v1/hold", `{"key":` + q(key) + `,"metadata":{"note":"` + strings.Repeat("x", 1100) + `"}}`, 400, "invalid_request"},
		{"malformed ticket", "POST", "/v1/acquire", `{"key":` + q(key) + `,"ticket":"t_x"}`, 400, "invalid_request"},
		{"unknown ticket", "POST", "/v1/acquire", `{"key":` + q(key) + `,"ticket":"t_` + strings.Repeat("0", 32) + `"}`, 404, "ticket_not_found"},
		{"hold: malformed", "POST", "/v1/hold", `{`, 400, "malformed_json"},
		{"wrong method", "GET", "/v1/acquire", ``, 405, "method_not_allowed"},
		{"no route", "GET", "/v2/acquire", ``, 404, "not_found"},
		{"bad prefix", "GET", "/v1/keys?prefix=%01", ``, 400, "invalid_key"},
	}
	before := e.redis("DBSIZE")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := e.try(context.Background(), c.method, c.path, c.body)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != c.status || r.Code() != c.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Raw, c.status, c.code)
			}
			if msg, _ := r.Body["error"].(map[string]any)["message"].(string); msg == "" {
				t.Fatalf("no message: %s", r.Raw)
			}
		})
	}
	if keys := e.redisKeys(); keys != "" {
		t.Fatalf("the refused requests left keys on Redis: %s", keys)
	}
	if after := e.redis("DBSIZE"); after != before {
		t.Fatalf("Redis held %s keys before the refused requests and %s after", before, after)
	}
}

func TestInspectList(t *testing.T) {
	e := newEnv(t)
	key := e.Key("a/b c")
	a := e.acquire(map[string]any{"key": key, "metadata": map[string]any{"note": "orders job"}})
	e.want(a, http.StatusOK, "")
	w := e.acquire(map[string]any{"key": key, "wait_ms": 10})
	e.want(w, http.StatusAccepted, "")

	in := e.do(context.Background(), http.MethodGet, "/v1/keys/"+escapePath(key), nil)
	e.want(in, http.StatusOK, "")
	holders, _ := in.Body["holders"].([]any)
	waiters, _ := in.Body["waiters"].([]any)
	if in.Str("key") != key || in.Str("kind") != "lock" || len(holders) != 1 || len(waiters) != 1 {
		t.Fatalf("inspect: %s", in.Raw)
	}
	h := holders[0].(map[string]any)
	if h["token_str"] != a.Str("token_str") || h["metadata"].(map[string]any)["note"] != "orders job" {
		t.Fatalf("holder %v, want token %s and the note", h, a.Str("token_str"))
	}

	ls := e.do(context.Background(), http.MethodGet, "/v1/keys?prefix="+escapeQuery(e.Prefix), nil)
	e.want(ls, http.StatusOK, "")
	keys, _ := ls.Body["keys"].([]any)
	if len(keys) != 1 || keys[0].(map[string]any)["key"] != key {
		t.Fatalf("list: %s", ls.Raw)
	}
}

func TestOpenAPI_servedAsInDocs(t *testing.T) {
	e := newEnv(t)
	r := e.do(context.Background(), http.MethodGet, "/openapi.yaml", nil)
	docs, err := os.ReadFile("../../../docs/gateway.openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK || r.Raw != string(docs) {
		t.Fatalf("GET /openapi.yaml: %d, %d bytes; docs/gateway.openapi.yaml has %d: keep gateway/openapi.yaml and it the same", r.Status, len(r.Raw), len(docs))
	}
}
