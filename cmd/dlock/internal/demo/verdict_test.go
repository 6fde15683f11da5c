package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/httpfence"
)

// ledgerCall POSTs one request to the ledger at url with the holder's
// fencing headers, and returns the answer and the error CheckResponse makes
// of a refusal.
func ledgerCall(t *testing.T, url, path, worker string, token uint64, order int) (response, error) {
	t.Helper()
	body, _ := json.Marshal(request{Worker: worker, Order: order})
	req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
	httpfence.SetHeaders(req.Header, Fence, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := httpfence.CheckResponse(resp); err != nil {
		return response{}, err
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", path, resp.Status)
	}
	var r response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r, nil
}

// play drives a ledger, over HTTP as the workers do, through the demo's
// fault in miniature: holder 10 reads order 1 and is frozen; holder 11
// reads, closes order 1; holder 10 wakes and closes order 1 with its old
// token. With fencing on, the ledger's httpfence.Guard refuses that close.
func play(t *testing.T, fencing bool) []Record {
	t.Helper()
	l := NewLedger(1, fencing)
	srv := httptest.NewServer(l)
	defer srv.Close()
	call := func(path, worker string, token uint64, order int) (response, error) {
		return ledgerCall(t, srv.URL, path, worker, token, order)
	}
	if r, _ := call("/read", "w1", 10, 0); r.Order != 1 || r.Job != 1 {
		t.Fatalf("first read = %+v, want order 1, job 1", r)
	}
	call("/step", "w1", 10, 1)
	if r, _ := call("/read", "w2", 11, 0); r.Order != 1 || r.Job != 2 {
		t.Fatalf("second read = %+v, want order 1 (still open), job 2", r)
	}
	if r, err := call("/close", "w2", 11, 1); err != nil || !r.Accepted {
		t.Fatalf("fresh close rejected: %+v, %v", r, err)
	}
	_, err := call("/close", "w1", 10, 1)
	var stale *dlock.StaleTokenError
	switch {
	case fencing && (!errors.As(err, &stale) || stale.Token != 10 || stale.Recorded != 11):
		t.Fatalf("stale close with fencing: %v, want a *dlock.StaleTokenError of 10, 11 recorded", err)
	case !fencing && err != nil:
		t.Fatalf("stale close without fencing: %v, want accepted", err)
	}
	if r, _ := call("/read", "w2", 12, 0); r.Order != 0 {
		t.Fatalf("read after all closed = %+v, want no order", r)
	}
	return l.Records()
}

func TestLedger_close_rejectsStaleTokenWithFencing(t *testing.T) {
	recs := play(t, true)
	last := recs[len(recs)-2]
	if last.Op != OpClose || last.Accepted || !last.Stale() || !strings.Contains(last.Reason, "stale token 10") ||
		last.Worker != "w1" || last.Order != 1 || last.Job != 1 {
		t.Errorf("stale close recorded as %+v", last)
	}
}

func TestLedger_close_acceptsStaleTokenWithoutFencing(t *testing.T) {
	recs := play(t, false)
	last := recs[len(recs)-2]
	if last.Op != OpClose || !last.Accepted || !last.Stale() {
		t.Errorf("stale close recorded as %+v", last)
	}
}

func TestComputeVerdict_fencingStopsTheStaleWrite(t *testing.T) {
	v := computeVerdict("ledger", true, 1, time.Second, play(t, true), nil, nil, nil)
	if !v.Safe || v.StaleRejected != 1 || v.StaleAccepted != 0 || len(v.ClosedTwice) != 0 || v.OrdersClosed != 1 {
		t.Errorf("verdict = %+v, want safe with one stale write rejected", v)
	}
	if len(v.Overlaps) != 1 || v.Overlaps[0].A.Token != 10 || v.Overlaps[0].B.Token != 11 {
		t.Errorf("overlaps = %+v, want tokens 10 and 11", v.Overlaps)
	}
}

func TestComputeVerdict_withoutFencingReportsTheDamage(t *testing.T) {
	v := computeVerdict("ledger", false, 1, time.Second, play(t, false), nil, nil, nil)
	if v.Safe || v.StaleRejected != 0 || v.StaleAccepted != 1 || !slices.Equal(v.ClosedTwice, []int{1}) {
		t.Errorf("verdict = %+v, want unsafe with order 1 closed twice", v)
	}
	if len(v.Problems) != 2 {
		t.Errorf("problems = %q, want the stale write and the double close", v.Problems)
	}
}

func TestComputeVerdict_countsUnclosedOrders(t *testing.T) {
	l := NewLedger(2, true)
	l.read(request{Worker: "w1", Token: 1})
	l.close(request{Worker: "w1", Token: 1, Order: 1})
	v := computeVerdict("ledger", true, 2, time.Second, l.Records(), nil, nil, nil)
	if v.Safe || v.OrdersClosed != 1 {
		t.Errorf("verdict = %+v, want unsafe: order 2 never closed", v)
	}
}

func TestComputeVerdict_handOffsAndFaultLatencies(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	grants := []grant{
		// Listed out of order: the verdict sorts by token.
		{Worker: "w2", Token: 2, WaitFrom: at(0), At: at(102), ReleaseAt: at(200), Released: true},
		{Worker: "w1", Token: 1, WaitFrom: at(0), At: at(0), ReleaseAt: at(100), Released: true},
		// w3 is killed at 250 and never releases.
		{Worker: "w3", Token: 3, WaitFrom: at(0), At: at(204)},
		// Granted after the kill: not a hand-off.
		{Worker: "w1", Token: 4, WaitFrom: at(110), At: at(1250), ReleaseAt: at(1300), Released: true},
		// Came after the release and found the lock free: not a hand-off.
		{Worker: "w2", Token: 5, WaitFrom: at(1400), At: at(1401), ReleaseAt: at(1500), Released: true},
	}
	faults := []Fault{{Kind: "SIGKILL", Worker: "w3", Job: 2, At: at(250)}}
	v := computeVerdict("ledger", true, 0, time.Second, nil, grants, faults, nil)
	if v.HandOffs != 2 {
		t.Fatalf("hand-offs = %d, want 2 (1→2 and 2→3)", v.HandOffs)
	}
	if *v.HandOffP50MS != 2 || *v.HandOffP99MS != 4 {
		t.Errorf("hand-off p50, p99 = %v, %v; want 2, 4", *v.HandOffP50MS, *v.HandOffP99MS)
	}
	if v.KillToGrantMS == nil || *v.KillToGrantMS != 1000 {
		t.Errorf("kill to grant = %v, want 1000", v.KillToGrantMS)
	}
	if v.FreezeToGrantMS != nil {
		t.Errorf("freeze to grant = %v, want none: nothing was frozen", *v.FreezeToGrantMS)
	}
}

func TestPercentile_nearestRank(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	if p := percentile(xs, 0.5); p != 50 {
		t.Errorf("p50 = %v, want 50", p)
	}
	if p := percentile(xs, 0.99); p != 99 {
		t.Errorf("p99 = %v, want 99", p)
	}
	if p := percentile([]float64{7}, 0.99); p != 7 {
		t.Errorf("p99 of one = %v, want 7", p)
	}
}

func TestLedger_ServeHTTP(t *testing.T) {
	srv := httptest.NewServer(NewLedger(1, true))
	defer srv.Close()
	if _, err := ledgerCall(t, srv.URL, "/read", "w1", 5, 0); err != nil {
		t.Errorf("POST /read: %v", err)
	}
	// Without the fencing headers, the Guard refuses the request.
	resp, err := http.Post(srv.URL+"/read", "application/json", strings.NewReader(`{"worker":"w1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPreconditionRequired {
		t.Errorf("POST /read without a token: %s, want 428", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/read", nil)
	httpfence.SetHeaders(req.Header, Fence, 5)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /read: %s, want 400", resp.Status)
	}
}
