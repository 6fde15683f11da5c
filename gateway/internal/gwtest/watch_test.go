package gwtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/gateway"
)

// scene is the state the watch and dashboard tests look at, taken through
// the library on the test's prefix: a lock held by worker-a with worker-b
// and worker-c waiting in that order, a semaphore with 2 of its 3 permits
// taken, and an election led by 10.0.0.7:8080 with 10.0.0.8:8080 waiting.
type scene struct {
	e                          *env
	orders, reports, scheduler string
	ordersLease                *dlock.Lease
	leader                     *dlock.Leadership
	ctx                        context.Context // the waiting calls'
	cancel                     context.CancelFunc
	waiting                    map[string]chan waitResult
}

type waitResult struct {
	lease *dlock.Lease
	err   error
}

func note(n string) dlock.CommonOption {
	return dlock.WithMetadata(dlock.Metadata{Host: "app-1", PID: 4242, Note: n})
}

func newScene(e *env) *scene {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &scene{e: e, orders: e.Key("orders"), reports: e.Key("reports"), scheduler: e.Key("scheduler"), ctx: ctx, cancel: cancel, waiting: map[string]chan waitResult{}}
	var held []*dlock.Lease
	e.T.Cleanup(func() {
		cancel()
		for _, ch := range s.waiting {
			if r := <-ch; r.lease != nil {
				held = append(held, r.lease)
			}
		}
		for _, l := range held {
			_ = l.Unlock(context.Background())
		}
	})
	l, err := e.Direct.Lock(ctx, s.orders, note("worker-a"), dlock.WithTTL(30*time.Second))
	if err != nil {
		e.T.Fatal(err)
	}
	s.ordersLease = l
	held = append(held, l)
	for i, w := range []string{"worker-b", "worker-c"} {
		s.wait(w, func(ctx context.Context) (*dlock.Lease, error) {
			return e.Direct.Lock(ctx, s.orders, note(w), dlock.WithTTL(30*time.Second))
		})
		e.eventually(w+" waits", func() bool { return len(e.Info(s.orders).Waiters) == i+1 })
	}
	for _, n := range []string{"report-1", "report-2"} {
		p, err := e.Direct.Semaphore(s.reports, 3).Acquire(ctx, note(n))
		if err != nil {
			e.T.Fatal(err)
		}
		held = append(held, p)
	}
	s.leader, err = e.Direct.Election(s.scheduler).Campaign(ctx, "10.0.0.7:8080", note("sched-a"))
	if err != nil {
		e.T.Fatal(err)
	}
	held = append(held, s.leader.Lease())
	s.wait("sched-b", func(ctx context.Context) (*dlock.Lease, error) {
		t, err := e.Direct.Election(s.scheduler).Campaign(ctx, "10.0.0.8:8080", note("sched-b"))
		if err != nil {
			return nil, err
		}
		return t.Lease(), nil
	})
	e.eventually("sched-b is a candidate", func() bool { return len(e.Info(s.scheduler).Waiters) == 1 })
	return s
}

// wait starts a call that waits in a queue, its result kept under name.
func (s *scene) wait(name string, call func(context.Context) (*dlock.Lease, error)) {
	ch := make(chan waitResult, 1)
	s.waiting[name] = ch
	go func() {
		l, err := call(s.ctx)
		ch <- waitResult{l, err}
	}()
}

// handOff releases worker-a's lock (worker-b is granted it) and the
// leader's term (sched-b leads), and waits for both grants.
func (s *scene) handOff() {
	t := s.e.T
	t.Helper()
	if err := s.ordersLease.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.leader.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"worker-b", "sched-b"} {
		select {
		case r := <-s.waiting[name]:
			if r.err != nil {
				t.Fatalf("%s: %v", name, r.err)
			}
			s.waiting[name] = make(chan waitResult, 1)
			s.waiting[name] <- r // released by the cleanup
		case <-time.After(waitFor):
			t.Fatalf("%s not granted within %v", name, waitFor)
		}
	}
}

// releaseWaiters ends the waiting calls and releases what they were
// granted: the lock's and the election's keys are left with nobody.
func (s *scene) releaseWaiters() {
	t := s.e.T
	t.Helper()
	s.cancel()
	for name, ch := range s.waiting {
		r := <-ch
		if r.lease != nil {
			if err := r.lease.Unlock(context.Background()); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		s.waiting[name] = make(chan waitResult, 1)
		s.waiting[name] <- waitResult{} // for the cleanup
	}
}

// watcher is an open GET /v1/watch stream.
type watcher struct{ *events }

func (e *env) watch(query string, header http.Header) *watcher {
	e.T.Helper()
	return &watcher{e.openEvents("/v1/watch?"+query, header)}
}

// watchEvent is a decoded event of a watch stream.
type watchEvent struct {
	Event string    `json:"event"`
	ID    string    `json:"id"`
	Keys  []keyView `json:"keys"` // snapshot
	keyView
	sseID string // the SSE id line's value
}

type keyView struct {
	Key     string      `json:"key"`
	Kind    string      `json:"kind"`
	Limit   int         `json:"limit"`
	Holders []entryView `json:"holders"`
	Waiters []entryView `json:"waiters"`
}

type entryView struct {
	TokenStr string         `json:"token_str"`
	TTLMs    *int64         `json:"ttl_ms"`
	Value    string         `json:"value"`
	Metadata dlock.Metadata `json:"metadata"`
}

// notes is the entries' notes, in order.
func notes(es []entryView) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Metadata.Note)
	}
	return strings.Join(out, ",")
}

// next returns the next event that is not a keep-alive.
func (w *watcher) next(t *testing.T) watchEvent {
	t.Helper()
	ev, err := w.read()
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func (w *watcher) read() (watchEvent, error) {
	for {
		data, id, err := w.data()
		if err != nil {
			return watchEvent{}, fmt.Errorf("watch stream ended: %v", err)
		}
		var ev watchEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return ev, fmt.Errorf("event %q: %v", data, err)
		}
		if ev.Event != "keepalive" {
			ev.sseID = id
			return ev, nil
		}
	}
}

// until reads events, applying them to view, until cond holds of it.
func (w *watcher) until(t *testing.T, view map[string]keyView, what string, cond func() bool) {
	t.Helper()
	deadline := time.AfterFunc(waitFor, func() { w.resp.Body.Close() })
	defer deadline.Stop()
	for !cond() {
		ev, err := w.read()
		if err != nil {
			t.Fatalf("%s: not within %v (%v); the view: %+v", what, waitFor, err, view)
		}
		switch ev.Event {
		case "snapshot":
			clear(view)
			for _, k := range ev.Keys {
				view[k.Key] = k
			}
		case "key":
			if len(ev.Holders) == 0 && len(ev.Waiters) == 0 {
				delete(view, ev.Key)
			} else {
				view[ev.Key] = ev.keyView
			}
		default:
			t.Fatalf("event %q", ev.Event)
		}
	}
}

func TestWatch_snapshotThenChanges(t *testing.T) {
	e := newEnv(t, gateway.WatchListInterval(50*time.Millisecond))
	s := newScene(e)
	w := e.watch("prefix="+escapeQuery(e.Prefix), nil)
	first := w.next(t)
	if first.Event != "snapshot" || len(first.Keys) != 3 {
		t.Fatalf("first event: %+v, want a snapshot of 3 keys", first)
	}
	view := map[string]keyView{}
	for _, k := range first.Keys {
		view[k.Key] = k
	}
	orders, reports, sched := view[s.orders], view[s.reports], view[s.scheduler]
	if orders.Kind != "lock" || notes(orders.Holders) != "worker-a" || notes(orders.Waiters) != "worker-b,worker-c" {
		t.Errorf("orders: %+v", orders)
	}
	if h := orders.Holders; len(h) == 1 && (h[0].TTLMs == nil || *h[0].TTLMs <= 0 || *h[0].TTLMs > 30000 || h[0].TokenStr != fmt.Sprint(s.ordersLease.Token())) {
		t.Errorf("orders' holder: %+v, want token %d and a TTL left of at most 30 s", h[0], s.ordersLease.Token())
	}
	if reports.Kind != "semaphore" || reports.Limit != 3 || len(reports.Holders) != 2 {
		t.Errorf("reports: %+v, want 2 of 3 permits", reports)
	}
	if sched.Kind != "election" || len(sched.Holders) != 1 || sched.Holders[0].Value != "10.0.0.7:8080" || len(sched.Waiters) != 1 || sched.Waiters[0].Value != "10.0.0.8:8080" {
		t.Errorf("scheduler: %+v", sched)
	}

	s.handOff()
	w.until(t, view, "the hand-offs", func() bool {
		o, sc := view[s.orders], view[s.scheduler]
		return notes(o.Holders) == "worker-b" && notes(o.Waiters) == "worker-c" &&
			len(sc.Holders) == 1 && sc.Holders[0].Value == "10.0.0.8:8080" && len(sc.Waiters) == 0
	})
	// A key released by all leaves the view.
	s.releaseWaiters()
	w.until(t, view, "orders and scheduler gone", func() bool {
		_, o := view[s.orders]
		_, sc := view[s.scheduler]
		return !o && !sc && len(view) == 1
	})
}

func TestWatch_resumeWithLastEventID(t *testing.T) {
	e := newEnv(t, gateway.WatchListInterval(50*time.Millisecond))
	ctx := context.Background()
	l, err := e.Direct.Lock(ctx, e.Key("a"), note("first"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	sse := http.Header{"Accept": {"text/event-stream"}}
	w := e.watch("prefix="+escapeQuery(e.Prefix), sse)
	snap := w.next(t)
	if snap.Event != "snapshot" || snap.sseID == "" || snap.sseID != snap.ID || len(snap.Keys) != 1 {
		t.Fatalf("first event %+v, id line %q", snap, snap.sseID)
	}

	// Resumed with the id of the view it has, a client gets no snapshot:
	// its first event is the next change.
	resumed := e.watch("prefix="+escapeQuery(e.Prefix), http.Header{"Accept": {"text/event-stream"}, "Last-Event-ID": {snap.ID}})
	l2, err := e.Direct.Lock(ctx, e.Key("b"), note("second"))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Unlock(ctx)
	if ev := resumed.next(t); ev.Event != "key" || ev.Key != e.Key("b") || ev.ID == snap.ID {
		t.Fatalf("resumed stream's first event %+v, want key b's", ev)
	}
	// Resumed with an id of another view (the query parameter, as
	// EventSource's page sends it), a client gets the current snapshot.
	stale := e.watch("prefix="+escapeQuery(e.Prefix)+"&last_event_id="+snap.ID, nil)
	if ev := stale.next(t); ev.Event != "snapshot" || len(ev.Keys) != 2 {
		t.Fatalf("stale resume's first event %+v, want a snapshot of 2 keys", ev)
	}
}

func TestWatch_streamTicketsAreSingleUse(t *testing.T) {
	e := newEnv(t)
	r := e.do(context.Background(), http.MethodPost, "/v1/stream-tickets", nil)
	e.want(r, http.StatusOK, "")
	ticket := r.Str("stream_ticket")
	if !strings.HasPrefix(ticket, "s_") || r.Num("valid_for_ms") != gateway.StreamTicketTTL.Milliseconds() {
		t.Fatalf("stream ticket reply %s", r.Raw)
	}
	w := e.watch("stream_ticket="+ticket+"&prefix="+escapeQuery(e.Prefix), nil)
	if ev := w.next(t); ev.Event != "snapshot" {
		t.Fatalf("first event %+v", ev)
	}
	e.want(e.do(context.Background(), http.MethodGet, "/v1/watch?stream_ticket="+ticket, nil), http.StatusNotFound, gateway.CodeTicketNotFound)
	e.want(e.do(context.Background(), http.MethodGet, "/v1/watch?stream_ticket=s_nothex", nil), http.StatusBadRequest, gateway.CodeInvalidRequest)
}

func TestWatch_refusals(t *testing.T) {
	e := newEnv(t, gateway.MaxWatches(1))
	_ = e.watch("prefix="+escapeQuery(e.Prefix), nil)
	e.want(e.do(context.Background(), http.MethodGet, "/v1/watch?prefix=x", nil), http.StatusTooManyRequests, gateway.CodeTooManyWatches)

	e2 := newEnv(t)
	e2.want(e2.do(context.Background(), http.MethodGet, "/v1/watch?prefix=%01", nil), http.StatusBadRequest, gateway.CodeInvalidKey)
	e2.want(e2.do(context.Background(), http.MethodPost, "/v1/watch", nil), http.StatusMethodNotAllowed, gateway.CodeMethod)
}

// The watch on etcd and ZooKeeper (the other tests run on Redis): the
// snapshot shows a holder and a waiter, and the stream the hand-off.
func TestWatch_backends(t *testing.T) {
	for _, b := range otherBackends {
		t.Run(b.name, func(t *testing.T) {
			e := newEnvOn(t, b.url(t))
			ctx := context.Background()
			key := e.Key("k")
			first, err := e.Direct.Lock(ctx, key, note("first"))
			if err != nil {
				t.Fatal(err)
			}
			granted := make(chan waitResult, 1)
			go func() {
				l, err := e.Direct.Lock(ctx, key, note("second"))
				granted <- waitResult{l, err}
			}()
			e.eventually("second waits", func() bool { return len(e.Info(key).Waiters) == 1 })
			w := e.watch("prefix="+escapeQuery(e.Prefix), nil)
			view := map[string]keyView{}
			w.until(t, view, "first holding, second waiting", func() bool {
				return notes(view[key].Holders) == "first" && notes(view[key].Waiters) == "second"
			})
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			w.until(t, view, "second holding", func() bool {
				return notes(view[key].Holders) == "second" && len(view[key].Waiters) == 0
			})
			if r := <-granted; r.err != nil {
				t.Fatal(r.err)
			} else if err := r.lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			w.until(t, view, "the key gone", func() bool { _, ok := view[key]; return !ok })
		})
	}
}
