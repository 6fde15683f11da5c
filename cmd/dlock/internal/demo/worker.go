package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/httpfence"
)

// Key is the lock every worker takes, as in the seeds' scenario.
const Key = "order"

// Event is what a worker tells the demo's parent about its lock.
type Event struct {
	Worker string    `json:"worker"`
	Kind   string    `json:"kind"` // see the Event* constants
	Token  uint64    `json:"token,omitempty"`
	At     time.Time `json:"at"` // the worker's clock, same machine
	// Since is, for EventReleased and EventLost, when Unlock was called:
	// the start of the hand-off.
	Since  time.Time `json:"since,omitzero"`
	Detail string    `json:"detail,omitempty"`
}

// Event kinds.
const (
	EventWaiting   = "waiting"   // about to call Lock
	EventAcquired  = "acquired"  // Lock returned
	EventReleasing = "releasing" // about to call Unlock
	EventReleased  = "released"  // Unlock succeeded
	EventLost      = "lost"      // Unlock said the lease had been lost
	EventClosed    = "closed"    // the ledger accepted the write
	EventRejected  = "rejected"  // the ledger rejected the write
	EventFinished  = "finished"  // no open orders left; the worker exits
)

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	Name    string        // w1, w2, …
	Ledger  string        // base URL of the ledger and event endpoint
	JobTime time.Duration // how long one job works between read and write
	// SQLite, if set, is the database the orders are in (--store
	// sqlite or postgres://…): a SQLite path or a PostgreSQL URL
	// (Config.DB). The worker reads and closes them there, through
	// sqlfence when Fencing is set, and reports to the ledger.
	SQLite  string
	Fencing bool
}

// RunWorker is the body of a worker process: until no open order is left,
// take the lock, read the next expired order, work on it, close it with the
// lock's token, unlock.
//
// On purpose it does NOT check lease.Done before it writes. A real job
// should, but no check can close the gap between checking and writing: a
// process can be paused right after the check. The demo shows that the
// store's token check, not the lock, is what keeps a paused holder from
// doing damage.
func RunWorker(ctx context.Context, client *dlock.Client, cfg WorkerConfig) error {
	w := &workerConn{cfg: cfg, http: &http.Client{}}
	if cfg.SQLite != "" {
		db, err := openOrderDB(cfg.SQLite, cfg.Fencing)
		if err != nil {
			return err
		}
		defer db.Close()
		w.db = db
	}
	for {
		w.event(ctx, Event{Kind: EventWaiting})
		lease, err := client.Lock(ctx, Key)
		if err != nil {
			return fmt.Errorf("lock %q: %w", Key, err)
		}
		token := lease.Token()
		w.event(ctx, Event{Kind: EventAcquired, Token: token})

		finished, err := w.job(ctx, token)
		if err != nil {
			return err
		}

		// Announce the release before it happens, so that the parent
		// hears of it before the next holder's grant.
		w.event(ctx, Event{Kind: EventReleasing, Token: token})
		uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		since := time.Now()
		err = lease.Unlock(uctx)
		cancel()
		switch {
		case err == nil:
			w.event(ctx, Event{Kind: EventReleased, Token: token, Since: since})
		case errors.Is(err, dlock.ErrNotHeld):
			w.event(ctx, Event{Kind: EventLost, Token: token, Since: since, Detail: err.Error()})
		default:
			return fmt.Errorf("unlock: %w", err)
		}
		if finished {
			w.event(ctx, Event{Kind: EventFinished})
			return nil
		}
	}
}

// job is one job under the lock: read the next order, work, close it.
// finished reports that no open order was left. A stale token refused by
// the store ends the job early (the holder has lost its lock); it is not an
// error of the worker.
func (w *workerConn) job(ctx context.Context, token uint64) (finished bool, err error) {
	// Every ledger call of this lease carries its fencing headers.
	fenced := &http.Client{Transport: &httpfence.Transport{Fence: Fence, Token: token}}
	order, err := w.read(ctx, fenced, token)
	switch {
	case errors.Is(err, dlock.ErrStaleToken):
		w.event(ctx, Event{Kind: EventRejected, Token: token, Detail: err.Error()})
		return false, nil
	case err != nil:
		return false, err
	case order == 0:
		return true, nil
	}
	time.Sleep(w.cfg.JobTime / 2) // working on the order
	err = w.call(ctx, fenced, "/step", request{Worker: w.cfg.Name, Order: order}, nil)
	if errors.Is(err, dlock.ErrStaleToken) {
		w.event(ctx, Event{Kind: EventRejected, Token: token, Detail: err.Error()})
		return false, nil
	} else if err != nil {
		return false, err
	}
	time.Sleep(w.cfg.JobTime / 2)
	err = w.close(ctx, fenced, token, order)
	switch {
	case errors.Is(err, dlock.ErrStaleToken):
		w.event(ctx, Event{Kind: EventRejected, Token: token, Detail: err.Error()})
	case err != nil:
		return false, err
	default:
		w.event(ctx, Event{Kind: EventClosed, Token: token, Detail: fmt.Sprint(order)})
	}
	return false, nil
}

// read returns the next expired order: the ledger's answer, or, with the
// orders in the database, what the database says, reported to the ledger.
func (w *workerConn) read(ctx context.Context, fenced *http.Client, token uint64) (int, error) {
	if w.db == nil {
		var read response
		err := w.call(ctx, fenced, "/read", request{Worker: w.cfg.Name}, &read)
		return read.Order, err
	}
	order, err := w.db.next(ctx, token)
	if err := w.reportDB(ctx, fenced, "/read", order, err, "read the next order"); err != nil {
		return 0, err
	}
	return order, nil
}

// close closes the order: at the ledger, or in the database, reported to
// the ledger. A refusal is an error satisfying dlock.ErrStaleToken.
func (w *workerConn) close(ctx context.Context, fenced *http.Client, token uint64, order int) error {
	if w.db == nil {
		var res response
		if err := w.call(ctx, fenced, "/close", request{Worker: w.cfg.Name, Order: order}, &res); err != nil {
			return err
		}
		if !res.Accepted {
			return fmt.Errorf("ledger /close: %s", res.Reason)
		}
		return nil
	}
	err := w.db.close(ctx, token, order, w.cfg.Name)
	return w.reportDB(ctx, fenced, "/close", order, err, fmt.Sprintf("close order %d", order))
}

// reportDB reports to the ledger, at path, the outcome err of the
// database's op on order: done (nil) or refused as stale (a
// *dlock.StaleTokenError, which reportDB returns after the report, as the
// op's outcome). Any other error is the worker's, returned as the failure
// to do what without a report.
func (w *workerConn) reportDB(ctx context.Context, fenced *http.Client, path string, order int, err error, what string) error {
	report := request{Worker: w.cfg.Name, Order: order, Accepted: err == nil}
	var stale *dlock.StaleTokenError
	switch {
	case errors.As(err, &stale):
		report.Reason = staleReason(stale)
	case err != nil:
		return fmt.Errorf("%s: %s: %w", w.db, what, err)
	}
	if rerr := w.call(ctx, fenced, path, report, nil); rerr != nil {
		return rerr
	}
	return err
}

type workerConn struct {
	cfg  WorkerConfig
	http *http.Client // for events: unfenced
	db   *orderDB     // nil: the orders are in the ledger
}

// event reports to the parent; a lost report only costs a progress line.
func (w *workerConn) event(ctx context.Context, e Event) {
	e.Worker, e.At = w.cfg.Name, time.Now()
	_ = w.call(ctx, w.http, "/event", e, nil)
}

// call POSTs body to the ledger's path with client. The ledger's refusal of
// a stale token is a *dlock.StaleTokenError (httpfence.CheckResponse).
func (w *workerConn) call(ctx context.Context, client *http.Client, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.Ledger+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	defer resp.Body.Close()
	if err := httpfence.CheckResponse(resp); err != nil {
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ledger %s: %s", path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
