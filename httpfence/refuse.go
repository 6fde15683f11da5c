package httpfence

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/dlockdev/dlock"
)

// The values of RefusedHeader, and of "error" in a JSON refusal.
const (
	refusedStale    = "stale"
	refusedUnfenced = "unfenced"
	refusedInvalid  = "invalid"
)

// refusal is the JSON body of a refusal.
type refusal struct {
	Error    string `json:"error"`
	Message  string `json:"message"`
	Fence    string `json:"fence,omitempty"`
	Token    uint64 `json:"token,omitempty"`
	Recorded uint64 `json:"recorded,omitempty"`
}

func isUnfenced(err error) bool { return errors.Is(err, ErrUnfenced) }

// refuse answers a request the Guard does not pass on. stale is set for a
// 409.
func refuse(w http.ResponseWriter, r *http.Request, status int, kind string, err error, stale *dlock.StaleTokenError) {
	h := w.Header()
	h.Set(RefusedHeader, kind)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	body := refusal{Error: kind, Message: err.Error()}
	hint := ""
	switch kind {
	case refusedStale:
		h.Set(FenceHeader, stale.Fence)
		h.Set(TokenHeader, strconv.FormatUint(stale.Token, 10))
		h.Set(RecordedHeader, strconv.FormatUint(stale.Recorded, 10))
		body.Fence, body.Token, body.Recorded = stale.Fence, stale.Token, stale.Recorded
		body.Message = "httpfence: " + stale.Error()
		hint = fmt.Sprintf("a newer lock holder (token %d) has written under this fence: the holder of token %d has lost its lease, and nothing was done", stale.Recorded, stale.Token)
	case refusedUnfenced:
		hint = fmt.Sprintf("this route accepts only fenced writes: send the lock's key or resource name in %s and the lease's token in %s", FenceHeader, TokenHeader)
	}
	if wantsJSON(r) {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, "%d %s: %s\n", status, http.StatusText(status), body.Message)
	if hint != "" {
		fmt.Fprintln(w, hint)
	}
}

// wantsJSON reports whether the request's Accept header names JSON
// (application/json or a +json type) with a non-zero quality.
func wantsJSON(r *http.Request) bool {
	for _, accept := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(accept, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			if q, err := strconv.ParseFloat(params["q"], 64); err == nil && q == 0 {
				continue
			}
			if mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
				return true
			}
		}
	}
	return false
}
