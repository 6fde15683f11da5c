package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/httpfence"
)

// Fence is the fence name of the job's writes: what its fencing tokens are
// compared within, in the ledger's httpfence.Guard and in the database's
// sqlfence table.
const Fence = "close-orders"

// Ledger is the shared resource of the demo: the order book that the
// order-closing job reads and writes. It lives in the demo's parent process
// and is reached over loopback HTTP, like a database that every worker
// shares.
//
// With fencing on, its routes are wrapped by an httpfence.Guard: every
// request carries the holder's lock token (httpfence.Transport), the Guard
// keeps the highest one seen and refuses a request with a lower one with
// 409 Conflict: such a request comes from a holder whose lease has ended and
// whose lock has passed to someone else. With fencing off there is no Guard
// and the ledger accepts every write, as a store that knows nothing about
// the lock would; it reads the tokens from the headers only to record them.
//
// With the orders in a database (NewReportLedger), the ledger decides
// nothing: /read and /close are the workers' reports of what they read and
// wrote there, recorded for the verdict.
//
// Closing an order is deliberately not idempotent (think "close the order
// and refund the customer"): an order closed twice is damage.
//
// A Ledger is safe for concurrent use.
type Ledger struct {
	fencing bool
	reports bool // the orders live in a database: record, do not decide
	orders  int
	start   time.Time
	handler http.Handler // the routes, behind the Guard with fencing on

	// onStep, if set, is called for every step report before it is
	// answered, while the worker waits for the answer: the demo injects
	// its faults there, in the middle of a job.
	onStep func(Record)
	// onRecord, if set, is called with every record, after it is stored.
	onRecord func(Record)

	mu       sync.Mutex
	maxToken uint64        // highest token seen on any request; guarded by mu
	closedBy map[int][]int // order -> indexes in records of accepted closes; guarded by mu
	records  []Record      // every request, in arrival order; guarded by mu
	jobs     int           // reads answered with an open order; guarded by mu
}

// Op is a kind of ledger request.
type Op string

const (
	// OpRead starts a job: "which expired order is next?". Never rejected.
	OpRead Op = "read"
	// OpStep reports progress halfway through a job. Never rejected.
	OpStep Op = "step"
	// OpClose is the job's write: close the order. Fenced.
	OpClose Op = "close"
)

// Record is one request as the ledger saw it.
type Record struct {
	At       time.Time `json:"at"`
	Worker   string    `json:"worker"`
	Token    uint64    `json:"token"`
	Op       Op        `json:"op"`
	Order    int       `json:"order,omitempty"` // 0: none (a read when all are closed)
	Job      int       `json:"job,omitempty"`   // the job (1, 2, …) a read started
	Accepted bool      `json:"accepted"`
	// MaxToken is the highest token the ledger had seen before this
	// request: a write with Token < MaxToken is stale.
	MaxToken uint64 `json:"max_token"`
	Reason   string `json:"reason,omitempty"`
}

// Stale reports whether r carries a token older than one already seen.
func (r Record) Stale() bool { return r.Token < r.MaxToken }

// NewLedger returns a ledger with orders 1..orders open.
func NewLedger(orders int, fencing bool) *Ledger {
	l := &Ledger{fencing: fencing, orders: orders, start: time.Now(), closedBy: map[int][]int{}}
	l.handler = http.HandlerFunc(l.serve)
	if fencing {
		l.handler = httpfence.New(httpfence.OnStale(l.refused)).Wrap(l.handler)
	}
	return l
}

// NewReportLedger returns a ledger that records the workers' reports of
// the orders they read and closed in a database; fencing says whether the
// database checks tokens.
func NewReportLedger(orders int, fencing bool) *Ledger {
	l := &Ledger{fencing: fencing, reports: true, orders: orders, start: time.Now(), closedBy: map[int][]int{}}
	l.handler = http.HandlerFunc(l.serve)
	return l
}

// request is the body of every ledger call. The token travels in the
// fencing headers (httpfence.SetHeaders), not in the body.
type request struct {
	Worker string `json:"worker"`
	Token  uint64 `json:"-"`
	Order  int    `json:"order,omitempty"`
	// Accepted and Reason are, in a report of a close in the database,
	// its outcome; in a report of a read, Accepted false says that the
	// database refused the read's token.
	Accepted bool   `json:"accepted,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// response is the answer to every ledger call.
type response struct {
	Accepted bool   `json:"accepted"`
	Order    int    `json:"order,omitempty"` // read: the next open order; 0 when all are closed
	Job      int    `json:"job,omitempty"`   // read: the job number
	Reason   string `json:"reason,omitempty"`
}

// ServeHTTP serves POST /read, /step and /close with JSON bodies and the
// fencing headers of package httpfence.
func (l *Ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.handler.ServeHTTP(w, r) }

func (l *Ledger) serve(w http.ResponseWriter, r *http.Request) {
	var req request
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "want POST with a JSON body", http.StatusBadRequest)
		return
	}
	claim, ok := httpfence.FromContext(r.Context())
	if !ok {
		// No Guard (fencing off): the token is read for the records only.
		var err error
		if claim, err = httpfence.ReadHeaders(r.Header); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	req.Token = claim.Token
	var resp response
	switch {
	case r.URL.Path == "/read" && l.reports:
		resp = l.readReport(req)
	case r.URL.Path == "/read":
		resp = l.read(req)
	case r.URL.Path == "/step":
		resp = l.step(req)
	case r.URL.Path == "/close" && l.reports:
		resp = l.closeReport(req)
	case r.URL.Path == "/close":
		resp = l.close(req)
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// noteLocked stores a record and updates the highest token seen. l.mu must be
// held.
func (l *Ledger) noteLocked(rec *Record) {
	rec.At = time.Now()
	rec.MaxToken = l.maxToken
	l.maxToken = max(l.maxToken, rec.Token)
	l.records = append(l.records, *rec)
}

// add makes a record with build, which runs under l.mu and may read and
// change the ledger's state, stores it (noteLocked), and reports it once
// l.mu is released.
func (l *Ledger) add(build func() Record) Record {
	l.mu.Lock()
	rec := build()
	l.noteLocked(&rec)
	l.mu.Unlock()
	l.report(rec)
	return rec
}

// newJobLocked numbers a new job, the read of an order. l.mu must be held.
func (l *Ledger) newJobLocked() int {
	l.jobs++
	return l.jobs
}

// closedLocked notes that the record about to be stored closes order.
// l.mu must be held.
func (l *Ledger) closedLocked(order int) {
	l.closedBy[order] = append(l.closedBy[order], len(l.records))
}

func (l *Ledger) read(req request) response {
	rec := l.add(func() Record {
		rec := Record{Worker: req.Worker, Token: req.Token, Op: OpRead, Accepted: true}
		for o := 1; o <= l.orders; o++ {
			if len(l.closedBy[o]) == 0 {
				rec.Order = o
				break
			}
		}
		if rec.Order != 0 {
			rec.Job = l.newJobLocked()
		}
		return rec
	})
	return response{Accepted: true, Order: rec.Order, Job: rec.Job}
}

func (l *Ledger) step(req request) response {
	rec := l.add(func() Record {
		return Record{Worker: req.Worker, Token: req.Token, Op: OpStep, Order: req.Order, Accepted: true, Job: l.jobOfLocked(req.Token)}
	})
	if l.onStep != nil {
		l.onStep(rec)
	}
	return response{Accepted: true}
}

func (l *Ledger) close(req request) response {
	rec := l.add(func() Record {
		rec := Record{Worker: req.Worker, Token: req.Token, Op: OpClose, Order: req.Order, Job: l.jobOfLocked(req.Token)}
		switch {
		case req.Order < 1 || req.Order > l.orders:
			rec.Reason = fmt.Sprintf("no order %d", req.Order)
		default:
			// A stale token never gets here with fencing on: the Guard
			// refused it (refused records it).
			rec.Accepted = true
			l.closedLocked(req.Order)
		}
		return rec
	})
	return response{Accepted: rec.Accepted, Reason: rec.Reason}
}

// refused records a request that the Guard refused as stale. It runs while
// the Guard holds the fence, so the records stay in the Guard's order.
func (l *Ledger) refused(r *http.Request, stale *dlock.StaleTokenError) {
	var req request
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	_ = json.Unmarshal(body, &req)
	r.Body = io.NopCloser(bytes.NewReader(body))
	op := map[string]Op{"/read": OpRead, "/step": OpStep, "/close": OpClose}[r.URL.Path]
	if op == "" {
		return
	}
	l.add(func() Record {
		return Record{Worker: req.Worker, Token: stale.Token, Op: op, Order: req.Order, Job: l.jobOfLocked(stale.Token),
			Reason: fmt.Sprintf("stale token %d: its httpfence.Guard has recorded token %d, 409 Conflict", stale.Token, stale.Recorded)}
	})
}

// readReport records a worker's read of the next order in the database.
func (l *Ledger) readReport(req request) response {
	rec := l.add(func() Record {
		rec := Record{Worker: req.Worker, Token: req.Token, Op: OpRead, Order: req.Order, Accepted: req.Accepted, Reason: req.Reason}
		if rec.Order != 0 && rec.Accepted {
			rec.Job = l.newJobLocked()
		}
		return rec
	})
	return response{Accepted: true, Order: rec.Order, Job: rec.Job}
}

// closeReport records a worker's close of an order in the database.
func (l *Ledger) closeReport(req request) response {
	l.add(func() Record {
		rec := Record{Worker: req.Worker, Token: req.Token, Op: OpClose, Order: req.Order, Job: l.jobOfLocked(req.Token),
			Accepted: req.Accepted, Reason: req.Reason}
		if rec.Accepted && rec.Order >= 1 && rec.Order <= l.orders {
			l.closedLocked(rec.Order)
		}
		return rec
	})
	return response{Accepted: true}
}

// jobOfLocked finds the job that token's holder read. l.mu must be held.
func (l *Ledger) jobOfLocked(token uint64) int {
	for i := len(l.records) - 1; i >= 0; i-- {
		if r := l.records[i]; r.Op == OpRead && r.Token == token {
			return r.Job
		}
	}
	return 0
}

func (l *Ledger) report(rec Record) {
	if l.onRecord != nil {
		l.onRecord(rec)
	}
}

// Records returns a copy of every request seen so far.
func (l *Ledger) Records() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.records)
}

// Done reports whether every order has been closed.
func (l *Ledger) Done() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for o := 1; o <= l.orders; o++ {
		if len(l.closedBy[o]) == 0 {
			return false
		}
	}
	return true
}
