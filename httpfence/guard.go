package httpfence

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/dlockdev/dlock"
)

// Guard is the middleware: it keeps the highest token each fence has
// admitted, refuses requests with a lower one, and runs the wrapped handler
// of one fence's requests one at a time. The zero Guard is not usable: call
// New. A Guard is safe for concurrent use and must not be copied; wrap every
// route of one fence with the same Guard, or the routes fence separately.
type Guard struct {
	onStale func(*http.Request, *dlock.StaleTokenError)
	// waiting, if set, is called when a request is about to wait for its
	// fence: a seam for this package's tests.
	waiting func(fence string)

	mu     sync.Mutex
	fences map[string]*fence // guarded by mu; entries are never removed
}

// fence is one fence's state.
type fence struct {
	// turn holds a value while a request of the fence is admitted: the
	// fence's mutex, as a channel so that a waiting request can give up
	// when its context ends.
	turn chan struct{}
	// recorded is the highest token admitted. It is written only by the
	// request holding turn, and read by Recorded without it.
	recorded atomic.Uint64
}

// Option configures a Guard.
type Option func(*Guard)

// OnStale registers fn to be called for every request refused as stale,
// before the 409 is written: to log or count refusals. It runs while the
// fence is held, so the calls of one fence are in the order of the fence's
// decisions; keep it short.
func OnStale(fn func(r *http.Request, err *dlock.StaleTokenError)) Option {
	return func(g *Guard) { g.onStale = fn }
}

// New returns a Guard that has recorded no token.
func New(opts ...Option) *Guard {
	g := &Guard{fences: map[string]*fence{}}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Wrap returns a handler that admits a request to next only when it carries
// a fence name and a token (FenceHeader, TokenHeader) and the token is not
// lower than the highest one the fence has admitted; the same token again is
// admitted (one holder, several requests). While next runs, other requests of
// the same fence wait: so a newer holder's request runs after this one has
// finished, and this one is refused if a newer holder came first. next reads
// the claim with FromContext.
//
// Wrap answers itself, without calling next:
//   - 409 Conflict for a stale token, with RecordedHeader set to the fence's
//     token; CheckResponse turns it into a *dlock.StaleTokenError;
//   - 428 Precondition Required for a request without either header;
//   - 400 Bad Request for headers it cannot use (see dlock.ErrInvalidFence);
//   - 503 Service Unavailable when the request's context ends (the client
//     went away) while it waits for its fence.
//
// The body says why, in plain text, or in JSON when the request's Accept
// header asks for it: {"error": "stale", "message": "…", "fence": "…",
// "token": 41, "recorded": 42}; "error" is the value of RefusedHeader.
//
// A handler that does not return holds its fence: every later request of
// that fence waits for it (until its own context ends). Bound the handler's
// work with its request's context; do not wrap next in http.TimeoutHandler,
// which answers the client but leaves next running after the fence has
// passed on.
func (g *Guard) Wrap(next http.Handler) http.Handler { return g.handler(next, true) }

// WrapOptional is Wrap for a route that also serves unfenced requests (a
// read, a health check): a request without either header goes to next at
// once, unfenced, and FromContext reports no claim. A request with the
// headers is fenced as by Wrap; one with unusable headers is refused with
// 400 as by Wrap.
func (g *Guard) WrapOptional(next http.Handler) http.Handler { return g.handler(next, false) }

// Recorded returns the highest token the fence has admitted, 0 if none. It
// does not wait for the fence.
func (g *Guard) Recorded(fenceName string) uint64 {
	g.mu.Lock()
	f := g.fences[fenceName]
	g.mu.Unlock()
	if f == nil {
		return 0
	}
	return f.recorded.Load()
}

func (g *Guard) handler(next http.Handler, required bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim, err := ReadHeaders(r.Header)
		switch {
		case err == nil:
		case !required && isUnfenced(err):
			next.ServeHTTP(w, r)
			return
		case isUnfenced(err):
			refuse(w, r, http.StatusPreconditionRequired, refusedUnfenced, err, nil)
			return
		default:
			refuse(w, r, http.StatusBadRequest, refusedInvalid, err, nil)
			return
		}

		f := g.fence(claim.Fence)
		if g.waiting != nil {
			g.waiting(claim.Fence)
		}
		select {
		case f.turn <- struct{}{}:
		case <-r.Context().Done():
			http.Error(w, fmt.Sprintf("httpfence: fence %q: the request ended while it waited for the fence: %v", claim.Fence, r.Context().Err()),
				http.StatusServiceUnavailable)
			return
		}
		// Released however next ends, a panic included (net/http
		// recovers handler panics and goes on serving).
		defer func() { <-f.turn }()

		if recorded := f.recorded.Load(); claim.Token < recorded {
			stale := &dlock.StaleTokenError{Fence: claim.Fence, Token: claim.Token, Recorded: recorded}
			if g.onStale != nil {
				g.onStale(r, stale)
			}
			refuse(w, r, http.StatusConflict, refusedStale, stale, stale)
			return
		}
		// Recorded before next runs, and kept whatever next does: the
		// token's holder has been seen, so every older holder has lost
		// its lease, whether or not this request's work succeeds. (A SQL
		// guard can take the token back with a rollback; a handler's
		// effects cannot be rolled back by the middleware.)
		f.recorded.Store(claim.Token)
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), claim)))
	})
}

// fence returns the named fence's state, creating it.
func (g *Guard) fence(name string) *fence {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.fences[name]
	if f == nil {
		f = &fence{turn: make(chan struct{}, 1)}
		g.fences[name] = f
	}
	return f
}
