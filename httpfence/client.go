package httpfence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/dlockdev/dlock"
)

// Transport is an http.RoundTripper that sets the fencing headers of one
// lease on every request it sends: an http.Client for the lease's writes.
//
//	client := &http.Client{Transport: &httpfence.Transport{Fence: "close-orders", Token: lease.Token()}}
//
// It does not look at the answers: pass them to CheckResponse. A Transport is
// safe for concurrent use once made.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Fence is the fence name for FenceHeader.
	Fence string
	// Token is the lease's fencing token for TokenHeader.
	Token uint64
}

// RoundTrip sends a copy of req with the fencing headers set. A Transport
// with an empty Fence or a zero Token sends nothing and returns an error
// wrapping dlock.ErrInvalidFence.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.valid(); err != nil {
		if req.Body != nil {
			req.Body.Close() // RoundTrip closes the body, even on errors
		}
		return nil, err
	}
	// A copy: a RoundTripper must not modify the caller's request (the
	// http.Client may send it again, on a redirect). Clone's Header is
	// nil for a request without one, which http.Transport accepts too.
	out := req.Clone(req.Context())
	if out.Header == nil {
		out.Header = http.Header{}
	}
	SetHeaders(out.Header, t.Fence, t.Token)
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(out)
}

func (t *Transport) valid() error {
	if t.Token == 0 {
		return fmt.Errorf("%w: fence %q: token 0 is no lease's token", dlock.ErrInvalidFence, t.Fence)
	}
	return validFence(t.Fence)
}

// CheckResponse returns the error of a response that a Guard answered in
// place of the handler, and nil for every other response, a 409 of the
// handler's own included:
//   - a stale token (409): a *dlock.StaleTokenError naming the fence, the
//     refused token and the recorded one, errors.Is(err, dlock.ErrStaleToken);
//   - no fencing headers (428): an error wrapping ErrUnfenced;
//   - unusable headers (400): an error wrapping dlock.ErrInvalidFence.
//
// The last two carry the Guard's explanation, read from the body; resp.Body
// still yields the whole body afterwards. CheckResponse does not close it.
func CheckResponse(resp *http.Response) error {
	kind := resp.Header.Get(RefusedHeader)
	switch {
	case kind == refusedStale && resp.StatusCode == http.StatusConflict:
		return staleError(resp)
	case kind == refusedUnfenced && resp.StatusCode == http.StatusPreconditionRequired:
		return fmt.Errorf("%w: the server answered %s: %s", ErrUnfenced, resp.Status, explanation(resp))
	case kind == refusedInvalid && resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("%w: the server answered %s: %s", dlock.ErrInvalidFence, resp.Status, explanation(resp))
	}
	return nil
}

func staleError(resp *http.Response) error {
	token, err1 := strconv.ParseUint(resp.Header.Get(TokenHeader), 10, 64)
	recorded, err2 := strconv.ParseUint(resp.Header.Get(RecordedHeader), 10, 64)
	if err1 != nil || err2 != nil {
		// Still a refusal of the Guard; only the figures are lost (a
		// proxy that drops headers).
		return fmt.Errorf("%w: the server answered %s", dlock.ErrStaleToken, resp.Status)
	}
	return &dlock.StaleTokenError{Fence: resp.Header.Get(FenceHeader), Token: token, Recorded: recorded}
}

// explanation returns the Guard's message from the start of resp's body,
// and puts the bytes read back in front of the rest.
func explanation(resp *http.Response) string {
	if resp.Body == nil {
		return "(no body)"
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	var r refusal
	if json.Unmarshal(head, &r) == nil && r.Message != "" {
		return r.Message
	}
	line, _, _ := strings.Cut(string(head), "\n")
	// The text form starts with the status, which the caller's error
	// already has.
	if _, rest, ok := strings.Cut(line, ": "); ok {
		return rest
	}
	return line
}
