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
}

// RunWorker is the body of a worker process: until the ledger has no open
// orders, take the lock, read the next expired order, work on it, close it
// with the lock's token, unlock.
//
// On purpose it does NOT check lease.Done before it writes. A real job
// should, but no check can close the gap between checking and writing: a
// process can be paused right after the check. The demo shows that the
// ledger's token check, not the lock, is what keeps a paused holder from
// doing damage.
func RunWorker(ctx context.Context, client *dlock.Client, cfg WorkerConfig) error {
	w := &workerConn{cfg: cfg, http: &http.Client{}}
	for {
		w.event(ctx, Event{Kind: EventWaiting})
		lease, err := client.Lock(ctx, Key)
		if err != nil {
			return fmt.Errorf("lock %q: %w", Key, err)
		}
		token := lease.Token()
		w.event(ctx, Event{Kind: EventAcquired, Token: token})

		var read response
		if err := w.call(ctx, "/read", request{Worker: cfg.Name, Token: token}, &read); err != nil {
			return err
		}
		if read.Order != 0 {
			time.Sleep(cfg.JobTime / 2) // working on the order
			if err := w.call(ctx, "/step", request{Worker: cfg.Name, Token: token, Order: read.Order}, nil); err != nil {
				return err
			}
			time.Sleep(cfg.JobTime / 2)
			var res response
			if err := w.call(ctx, "/close", request{Worker: cfg.Name, Token: token, Order: read.Order}, &res); err != nil {
				return err
			}
			if res.Accepted {
				w.event(ctx, Event{Kind: EventClosed, Token: token, Detail: fmt.Sprint(read.Order)})
			} else {
				w.event(ctx, Event{Kind: EventRejected, Token: token, Detail: res.Reason})
			}
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
		if read.Order == 0 {
			w.event(ctx, Event{Kind: EventFinished})
			return nil
		}
	}
}

type workerConn struct {
	cfg  WorkerConfig
	http *http.Client
}

// event reports to the parent; a lost report only costs a progress line.
func (w *workerConn) event(ctx context.Context, e Event) {
	e.Worker, e.At = w.cfg.Name, time.Now()
	_ = w.call(ctx, "/event", e, nil)
}

func (w *workerConn) call(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.Ledger+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.http.Do(req)
	if err != nil {
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ledger %s: %s", path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
