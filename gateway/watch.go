package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/dlockdev/dlock"
)

// maxWatchedKeys bounds the keys one watch stream follows with a backend
// watch (dlock.Client.Watch) each. Keys beyond it are still shown, by the
// stream's periodic List, only later.
const maxWatchedKeys = 256

// snapshotEvent is a watch stream's first event: every key under the
// prefix that is held or waited for.
type snapshotEvent struct {
	Event  string      `json:"event"` // "snapshot"
	ID     string      `json:"id"`
	Prefix string      `json:"prefix"`
	Keys   []infoReply `json:"keys"`
}

// keyEvent is a change of one key; a key with no holders and no waiters
// has gone from the view.
type keyEvent struct {
	Event string `json:"event"` // "key"
	ID    string `json:"id"`
	infoReply
}

// keyState is one key's state as read, and when.
type keyState struct {
	info   *dlock.LockInfo
	readAt time.Time
}

// watchStream is one GET /v1/watch: its view of the prefix (what the
// client was sent) and the per-key watches feeding it.
type watchStream struct {
	g      *Gateway
	prefix string
	out    *eventStream

	mu      sync.Mutex
	pending map[string]keyState // read, not yet sent; guarded by mu
	wake    chan struct{}       // buffer 1: a full buffer already says "pending"

	// Used by the handler's goroutine only.
	watched map[string]context.CancelFunc
	sent    map[string]uint64 // each key's state hash as last sent
	view    uint64            // the XOR of sent: the id of the client's view
	wg      sync.WaitGroup
}

// handleWatch: GET /v1/watch?prefix=P streams the state of the keys under
// P: a snapshot first, then each key's changes, as NDJSON or, for a client
// that accepts text/event-stream, as Server-Sent Events. Changes are learnt
// from a backend watch of each key (up to maxWatchedKeys), and from a List
// of the prefix every WatchListInterval, which finds the keys that appear
// and the changes a backend sends no notice of (see dlock.Client.Watch).
//
// Each event's id names the whole view the client has after it (a hash of
// every key's state but their TTLs): a client that resumes with it is sent
// nothing until something changes, and one whose view is out of date gets
// a new snapshot. No history is kept per client.
func (g *Gateway) handleWatch(w http.ResponseWriter, r *http.Request) {
	r, err := g.streamCaller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	prefix := r.URL.Query().Get("prefix")
	if err := allowPrefix(r, ActionRead, prefix); err != nil {
		writeError(w, err)
		return
	}
	end, err := g.openCounted(r, g.reserveWatchLocked, &g.watches)
	if err != nil {
		writeError(w, err)
		return
	}
	defer end()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel)
	defer stop()

	// The current state first, before the headers: a bad prefix or a
	// backend that cannot list is an error reply, not a broken stream.
	listed := time.Now()
	infos, lerr := g.client.List(ctx, prefix)
	if lerr != nil {
		writeError(w, fromLibrary(lerr))
		return
	}
	s := &watchStream{
		g: g, prefix: prefix, out: newEventStream(w, r),
		pending: make(map[string]keyState),
		wake:    make(chan struct{}, 1),
		watched: make(map[string]context.CancelFunc),
		sent:    make(map[string]uint64),
	}
	defer s.wg.Wait() // after cancel: every Client.Watch channel closes
	defer cancel()
	s.out.start()
	if !s.snapshot(infos, listed, lastEventID(r)) {
		return
	}
	s.follow(ctx)

	list := time.NewTicker(g.cfg.watchList)
	defer list.Stop()
	keep := time.NewTicker(g.cfg.keepAlive)
	defer keep.Stop()
	for {
		select {
		case <-s.wake:
			if !s.flush(ctx) {
				return
			}
		case <-list.C:
			s.relist(ctx)
			if !s.flush(ctx) {
				return
			}
		case <-keep.C:
			if !s.out.keepalive(struct {
				Event string `json:"event"`
			}{"keepalive"}) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// reserveWatchLocked counts a watch stream against MaxWatches. g.mu must
// be held.
func (g *Gateway) reserveWatchLocked() *apiError {
	switch {
	case g.closed:
		return errorf(http.StatusServiceUnavailable, CodeClosing, "the gateway is closing")
	case g.watches >= g.cfg.maxWatches:
		return errorf(http.StatusTooManyRequests, CodeTooManyWatches, "the gateway has its maximum of %d watch streams", g.cfg.maxWatches)
	}
	g.watches++
	return nil
}

// snapshot sends the view of infos, unless the client resumes with the id
// of that very view, and reports whether the stream is still writable.
func (s *watchStream) snapshot(infos []*dlock.LockInfo, readAt time.Time, last string) bool {
	ev := snapshotEvent{Event: "snapshot", Prefix: s.prefix, Keys: []infoReply{}}
	for _, in := range infos {
		h := stateHash(in)
		if h == 0 {
			continue
		}
		s.sent[in.Key] = h
		s.view ^= h
		ev.Keys = append(ev.Keys, ttlAt(infoOf(in), readAt, time.Now()))
	}
	ev.ID = viewID(s.view)
	if ev.ID == last {
		// The client has this view: the headers alone, so that it knows
		// the stream is open.
		return s.out.flush()
	}
	return s.out.send(ev.Event, ev.ID, ev)
}

// follow starts a backend watch of each key in the view not yet watched,
// up to maxWatchedKeys, and stops those of keys that left it.
func (s *watchStream) follow(ctx context.Context) {
	for key, cancel := range s.watched {
		if _, ok := s.sent[key]; !ok {
			cancel()
			delete(s.watched, key)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(s.sent)) {
		if len(s.watched) >= maxWatchedKeys {
			return
		}
		if _, ok := s.watched[key]; ok {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		s.watched[key] = cancel
		states := s.g.client.Watch(wctx, key)
		s.wg.Go(func() {
			for in := range states {
				s.put(key, keyState{in, time.Now()})
			}
		})
	}
}

// put records a state read and wakes the handler. States read while the
// handler writes wait in pending, the latest per key: a burst of changes
// is sent as one event per key.
func (s *watchStream) put(key string, st keyState) {
	s.mu.Lock()
	s.pending[key] = st
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// relist reads the prefix again: keys that appeared, keys that went, and
// changes no backend watch told of. A failed List is skipped: the next
// one, or a watch, brings the state.
func (s *watchStream) relist(ctx context.Context) {
	now := time.Now()
	infos, err := s.g.client.List(ctx, s.prefix)
	if err != nil {
		return
	}
	listed := make(map[string]bool, len(infos))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range infos {
		listed[in.Key] = true
		s.pending[in.Key] = keyState{in, now}
	}
	for key := range s.sent {
		if !listed[key] {
			s.pending[key] = keyState{&dlock.LockInfo{Key: key}, now}
		}
	}
}

// flush sends the pending states that differ from what the client has, in
// key order, and reports whether the stream is still writable.
func (s *watchStream) flush(ctx context.Context) bool {
	s.mu.Lock()
	pending := s.pending
	s.pending = make(map[string]keyState)
	s.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(pending)) {
		st := pending[key]
		h := stateHash(st.info)
		old := s.sent[key]
		if h == old {
			continue
		}
		s.view ^= old ^ h
		if h == 0 {
			delete(s.sent, key)
		} else {
			s.sent[key] = h
		}
		ev := keyEvent{Event: "key", ID: viewID(s.view), infoReply: ttlAt(infoOf(st.info), st.readAt, time.Now())}
		ev.Key = key
		if !s.out.send(ev.Event, ev.ID, ev) {
			return false
		}
	}
	s.follow(ctx)
	return true
}

// stateHash names a key's state for the client's view: 0 for a key nobody
// holds or waits for (it is not in the view), else a hash of its kind,
// limit and entries, whatever their TTL left.
func stateHash(in *dlock.LockInfo) uint64 {
	if len(in.Holders) == 0 && len(in.Waiters) == 0 {
		return 0
	}
	r := infoOf(in)
	for _, es := range [][]entryReply{r.Holders, r.Waiters} {
		for i := range es {
			es[i].TTLMs = nil
		}
	}
	b, _ := json.Marshal(r)
	h := fnv.New64a()
	h.Write(b)
	if sum := h.Sum64(); sum != 0 {
		return sum
	}
	return 1
}

func viewID(view uint64) string { return fmt.Sprintf("%016x", view) }

// ttlAt makes r's TTLs, read at readAt, count from now, when the event is
// written: the client counts them down from when it receives it. A List's
// states are stamped with the time before it was sent, so that a TTL is
// never shown longer than it is.
func ttlAt(r infoReply, readAt, now time.Time) infoReply {
	gone := now.Sub(readAt).Milliseconds()
	for _, es := range [][]entryReply{r.Holders, r.Waiters} {
		for i := range es {
			if es[i].TTLMs != nil {
				ms := max(0, *es[i].TTLMs-gone)
				es[i].TTLMs = &ms
			}
		}
	}
	return r
}
