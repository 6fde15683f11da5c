package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/keys"
)

// acquireRequest is the body of POST /v1/acquire and POST /v1/hold.
type acquireRequest struct {
	Key      string          `json:"key"`
	Kind     string          `json:"kind"`  // lock (default), semaphore, rwmutex
	Mode     string          `json:"mode"`  // exclusive or shared; a rwmutex's read lease is shared
	Limit    int             `json:"limit"` // a semaphore's permits
	TTLMs    int64           `json:"ttl_ms"`
	WaitMs   int64           `json:"wait_ms"`
	Ticket   string          `json:"ticket"`
	Value    *string         `json:"value"` // an election candidate's
	Metadata *dlock.Metadata `json:"metadata"`
}

// want is a validated acquireRequest.
type want struct {
	key   string
	kind  dlock.Kind
	mode  dlock.Mode
	limit int
	ttl   time.Duration // 0: the Client's default
	wait  time.Duration // 0: no wait
	value string        // an election's
	opts  []dlock.LockOption
}

// same reports whether a poll presenting a ticket asks for what the
// ticket waits for.
func (w *want) same(o *want) bool {
	return w.key == o.key && w.kind == o.kind && w.mode == o.mode && w.limit == o.limit && w.ttl == o.ttl && w.value == o.value
}

// decode reads r's body, of at most max bytes, into v: a JSON object with
// only v's fields and nothing after it.
func decode(w http.ResponseWriter, r *http.Request, max int64, v any) *apiError {
	body := http.MaxBytesReader(w, r.Body, max)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("data after the JSON object")
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body is longer than %d bytes", tooLarge.Limit)
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, CodeMalformedJSON, "empty body: want a JSON object")
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return errorf(http.StatusBadRequest, CodeMalformedJSON, "field %q: want a JSON %s", typeErr.Field, typeErr.Type)
	}
	return errorf(http.StatusBadRequest, CodeMalformedJSON, "%v", err)
}

// validKey is keys.Validate's verdict as a reply.
func validKey(key string) *apiError {
	if err := keys.Validate(key); err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidKey, "key %s: %v", keys.Quote(key), err)
	}
	return nil
}

// parse checks an acquire request: every refusal here happens before
// anything reaches the backend.
func (req *acquireRequest) parse(maxWait time.Duration) (*want, *apiError) {
	bad := func(format string, args ...any) (*want, *apiError) {
		return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, format, args...)
	}
	if err := validKey(req.Key); err != nil {
		return nil, err
	}
	w := &want{key: req.Key}
	switch req.Kind {
	case "", "lock":
		w.kind, w.limit, w.mode = dlock.KindLock, 1, dlock.Exclusive
	case "semaphore":
		w.kind, w.limit, w.mode = dlock.KindSemaphore, req.Limit, dlock.Shared
		if req.Limit < 1 {
			return bad("limit %d: a semaphore needs a limit of at least 1", req.Limit)
		}
	case "rwmutex":
		w.kind, w.mode = dlock.KindRWMutex, dlock.Exclusive
	case "election":
		w.kind, w.limit, w.mode = dlock.KindElection, 1, dlock.Exclusive
	default:
		return bad("kind %q: want lock, semaphore, rwmutex or election", req.Kind)
	}
	if req.Value != nil {
		if w.kind != dlock.KindElection {
			return bad("value: only an election's candidate publishes a value")
		}
		if len(*req.Value) > dlock.MaxValueLen {
			return bad("value is %d bytes long, the limit is %d", len(*req.Value), dlock.MaxValueLen)
		}
		w.value = *req.Value
	}
	if req.Kind != "semaphore" && req.Limit != 0 {
		return bad("limit %d: only a semaphore has a limit", req.Limit)
	}
	switch req.Mode {
	case "":
	case "exclusive", "shared":
		m := dlock.Exclusive
		if req.Mode == "shared" {
			m = dlock.Shared
		}
		if m != w.mode && w.kind != dlock.KindRWMutex {
			return bad("mode %q: a %v is always %v", req.Mode, w.kind, w.mode)
		}
		w.mode = m
	default:
		return bad("mode %q: want exclusive or shared", req.Mode)
	}
	if req.TTLMs != 0 {
		w.ttl = time.Duration(req.TTLMs) * time.Millisecond
		if w.ttl < dlock.MinTTL || w.ttl > dlock.MaxTTL || req.TTLMs > int64(dlock.MaxTTL/time.Millisecond) {
			return bad("ttl_ms %d: want %d to %d", req.TTLMs, dlock.MinTTL.Milliseconds(), dlock.MaxTTL.Milliseconds())
		}
		w.opts = append(w.opts, dlock.WithTTL(w.ttl))
	}
	if req.WaitMs < 0 {
		return bad("wait_ms %d: want 0 (no wait) or more", req.WaitMs)
	}
	w.wait = min(time.Duration(min(req.WaitMs, int64(maxWait/time.Millisecond)))*time.Millisecond, maxWait)
	if req.Metadata != nil {
		w.opts = append(w.opts, dlock.WithMetadata(*req.Metadata))
	}
	return w, nil
}

// leaseReply is what acquire, renew and the lease's GET answer, and the
// streaming hold's granted and keep-alive events.
type leaseReply struct {
	Event      string `json:"event,omitempty"` // streams only
	LeaseID    string `json:"lease_id"`
	Key        string `json:"key"`
	Kind       string `json:"kind"`
	Mode       string `json:"mode"`
	Limit      int    `json:"limit,omitempty"`
	Token      uint64 `json:"token"`
	TokenStr   string `json:"token_str"`
	TTLMs      int64  `json:"ttl_ms"`
	ValidForMs int64  `json:"valid_for_ms"`
	ReceivedAt string `json:"received_at"`
	Streamed   bool   `json:"streamed,omitempty"`
	// KeepAliveMs is a stream's longest interval between two events: a
	// client that hears nothing for longer treats the lease as lost.
	KeepAliveMs int64 `json:"keepalive_ms,omitempty"`
}

// waitReply is the 202 of a wait that ended ungranted.
type waitReply struct {
	Ticket           string `json:"ticket"`
	TicketValidForMs int64  `json:"ticket_valid_for_ms"`
	Key              string `json:"key"`
	ReceivedAt       string `json:"received_at"`
}

// endEvent is a streaming hold's last event: lost or released.
type endEvent struct {
	Event   string `json:"event"`
	LeaseID string `json:"lease_id"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// infoReply is one key in the replies of GET /v1/keys and /v1/keys/{key}.
type infoReply struct {
	Key     string       `json:"key"`
	Kind    string       `json:"kind"`
	Limit   int          `json:"limit"`
	Holders []entryReply `json:"holders"`
	Waiters []entryReply `json:"waiters"`
}

type entryReply struct {
	Token    uint64         `json:"token"`
	TokenStr string         `json:"token_str"`
	Mode     string         `json:"mode"`
	Since    string         `json:"since,omitempty"`
	TTLMs    *int64         `json:"ttl_ms,omitempty"` // absent when unknown
	Metadata dlock.Metadata `json:"metadata"`
	Value    string         `json:"value,omitempty"`
}

func infoOf(in *dlock.LockInfo) infoReply {
	conv := func(es []dlock.Entry) []entryReply {
		out := make([]entryReply, 0, len(es))
		for _, e := range es {
			r := entryReply{Token: e.Token, TokenStr: strconv.FormatUint(e.Token, 10), Mode: e.Mode.String(), Metadata: e.Metadata, Value: e.Value}
			if !e.Since.IsZero() {
				r.Since = e.Since.UTC().Format(time.RFC3339Nano)
			}
			if e.TTL >= 0 {
				ms := e.TTL.Milliseconds()
				r.TTLMs = &ms
			}
			out = append(out, r)
		}
		return out
	}
	return infoReply{Key: in.Key, Kind: in.Kind.String(), Limit: in.Limit, Holders: conv(in.Holders), Waiters: conv(in.Waiters)}
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	type body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = writeJSON(w, e.status, struct {
		Error body `json:"error"`
	}{body{e.code, e.message}})
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
