package gwtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// curl runs curl with args against the gateway and decodes its JSON
// output, which -w ends with the status on a line of its own.
func (e *env) curl(args ...string) reply {
	e.T.Helper()
	bin, err := exec.LookPath("curl")
	if err != nil {
		e.T.Fatal("curl not found: apt-get install -y curl")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	args = append([]string{"-sS", "-w", "\n%{http_code}"}, args...)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$GW", e.Srv.URL)
	}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		e.T.Fatalf("curl %v: %v", args, err)
	}
	s := strings.TrimSpace(string(out))
	i := strings.LastIndex(s, "\n")
	body, code := s[:max(i, 0)], s[i+1:]
	r := reply{Raw: body}
	if _, err := fmt.Sscan(code, &r.Status); err != nil {
		e.T.Fatalf("curl status %q: %v", code, err)
	}
	if body != "" {
		if err := json.Unmarshal([]byte(body), &r.Body); err != nil {
			e.T.Fatalf("curl output %q: %v", body, err)
		}
	}
	return r
}

func TestCurl_acquireRenewRelease(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	a := e.curl("-X", "POST", "$GW/v1/acquire", "-H", "Content-Type: application/json", "-d", `{"key":"`+key+`","ttl_ms":5000}`)
	e.want(a, http.StatusOK, "")
	id := a.Str("lease_id")
	e.want(e.curl("-X", "POST", "$GW/v1/acquire", "-d", `{"key":"`+key+`"}`), http.StatusConflict, "locked")
	e.want(e.curl("-X", "POST", "$GW/v1/leases/"+id+"/renew"), http.StatusOK, "")
	e.want(e.curl("-X", "DELETE", "$GW/v1/leases/"+id), http.StatusOK, "")
	e.want(e.curl("-X", "DELETE", "$GW/v1/leases/"+id), http.StatusGone, "lease_released")
	e.want(e.curl("-X", "POST", "$GW/v1/acquire", "-d", `{"key":`), http.StatusBadRequest, "malformed_json")
	if in := e.Info(key); len(in.Holders) != 0 {
		t.Fatalf("backend holders after curl's release: %+v", in.Holders)
	}
}

// curl -N holds the lease for as long as it runs; killing it releases.
func TestCurl_holdReleasedWhenKilled(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	cmd := exec.Command("curl", "-sS", "-N", "-X", "POST", e.Srv.URL+"/v1/hold", "-d", `{"key":"`+key+`","ttl_ms":60000}`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"event":"granted"`) {
		t.Fatalf("curl's first line %q, want the granted event", lines.Text())
	}
	got := make(chan reply, 1)
	go func() {
		r, _ := e.try(context.Background(), http.MethodPost, "/v1/acquire", map[string]any{"key": key, "wait_ms": 30000})
		got <- r
	}()
	e.eventually("the poll waits on the backend", func() bool { return len(e.Info(key).Waiters) == 1 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		e.want(r, http.StatusOK, "")
	case <-time.After(waitFor):
		t.Fatal("the next waiter was not granted after curl was killed (the TTL is 60s)")
	}
}
