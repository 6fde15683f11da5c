package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock"
)

// InstanceHeader names the response header that carries the gateway
// instance's id. Tickets, streamed leases and sticky leases (StickyHeader)
// live in the instance that granted them: a client behind a load balancer
// sends their requests to the instance named here.
const InstanceHeader = "Dlock-Gateway-Instance"

// StickyHeader names the response header of a lease's replies that says
// whether only the instance that granted it (InstanceHeader) serves its
// renew and release: "true" on a backend whose grant lives in the
// gateway's connection (a ZooKeeper session lives in one process) and for
// an election's term; "false" where the backend keeps the lease's state
// and instances sharing a LeaseKey serve each other's leases. Another
// instance answers a sticky lease's requests with 421 wrong_instance.
const StickyHeader = "Dlock-Gateway-Sticky"

// Gateway serves dlock's locks, semaphores, read-write locks and elections
// over HTTP/JSON (see docs/gateway.md and the OpenAPI document it serves at
// /openapi.yaml). It holds its sticky and streamed leases through its
// Client and gives each up when its client stops renewing it; the other
// explicit leases it hands off to the backend (see StickyHeader). It is
// safe for concurrent use.
type Gateway struct {
	client   *dlock.Client
	cfg      config
	mux      *http.ServeMux
	instance string
	keyID    []byte // the lease key's (leaseid.go)

	// ctx ends with Close, ending the waits and the streams.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// bg counts the goroutines the gateway starts (acquires for waiters,
	// releases), for Close.
	bg sync.WaitGroup

	mu      sync.Mutex
	leases  map[string]*held   // by lease id; guarded by mu
	ended   map[string]string  // ended lease ids: the code to answer them with; guarded by mu
	endedQ  []string           // ended's ids, oldest first, to bound it; guarded by mu
	waiters map[string]*waiter // by ticket; guarded by mu
	nheld   int                // leases held and slots reserved by waiters; guarded by mu
	// observers counts the election streams, bounded with the waiters;
	// guarded by mu.
	observers int
	// watches counts the watch streams, bounded by MaxWatches; guarded by mu.
	watches int
	// streamTickets maps the unused stream tickets to their expiry and
	// principal; guarded by mu.
	streamTickets map[string]streamTicket
	// streams counts each client's open streams, for MaxStreamsPerClient;
	// guarded by mu.
	streams map[string]int
	closed  bool // guarded by mu

	limiter *limiter // nil: no RateLimit
}

// maxEnded bounds the ended lease ids remembered, to tell a replayed
// release or a late renew from an id never issued.
const maxEnded = 10000

// New returns a Gateway taking its leases through client. The Gateway
// does not close client: close the Gateway first (Close releases the
// leases it holds), then the client. For explicit leases that any
// instance serves on etcd, open client with a lease per grant
// (etcddlock.Options.LeasePerGrant, lease_per_grant=true). It returns an error satisfying
// errors.Is(err, ErrInvalidOption) for a bad option.
func New(client *dlock.Client, opts ...Option) (*Gateway, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	g := &Gateway{
		client:   client,
		cfg:      cfg,
		instance: randomID("g_")[:14],
		keyID:    keyID(cfg.leaseKey),
		ctx:      ctx,
		cancel:   cancel,
		leases:   make(map[string]*held),
		ended:    make(map[string]string),
		waiters:  make(map[string]*waiter),

		streamTickets: make(map[string]streamTicket),
		streams:       make(map[string]int),
	}
	if cfg.rate > 0 {
		g.limiter = newLimiter(cfg.rate, cfg.burst)
	}
	g.routes()
	return g, nil
}

func (g *Gateway) routes() {
	m := http.NewServeMux()
	route := func(pattern string, methods map[string]func(http.ResponseWriter, *http.Request)) {
		m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			h, ok := methods[r.Method]
			if !ok {
				writeError(w, errorf(http.StatusMethodNotAllowed, CodeMethod, "%s %s is not served", r.Method, r.URL.Path))
				return
			}
			h(w, r)
		})
	}
	route("/v1/acquire", map[string]func(http.ResponseWriter, *http.Request){http.MethodPost: g.handleAcquire})
	route("/v1/hold", map[string]func(http.ResponseWriter, *http.Request){http.MethodPost: g.handleHold})
	route("/v1/leases/{id}", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: g.handleLease, http.MethodDelete: g.handleRelease})
	route("/v1/leases/{id}/renew", map[string]func(http.ResponseWriter, *http.Request){http.MethodPost: g.handleRenew})
	route("/v1/leases/{id}/release", map[string]func(http.ResponseWriter, *http.Request){http.MethodPost: g.handleRelease})
	route("/v1/tickets/{ticket}", map[string]func(http.ResponseWriter, *http.Request){http.MethodDelete: g.handleCancelTicket})
	route("/v1/leases/{id}/resign", map[string]func(http.ResponseWriter, *http.Request){http.MethodPost: g.handleRelease})
	route("/v1/leases/{id}/proclaim", map[string]func(http.ResponseWriter, *http.Request){http.MethodPost: g.handleProclaim})
	route("/v1/leader/{key...}", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: g.handleLeader})
	route("/v1/observe/{key...}", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: g.handleObserve})
	route("/v1/keys", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: g.handleList})
	route("/v1/keys/{key...}", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: g.handleInspect})
	route("/v1/watch", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: g.handleWatch})
	route("/v1/stream-tickets", map[string]func(http.ResponseWriter, *http.Request){http.MethodPost: g.handleStreamTicket})
	route("/openapi.yaml", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: serveOpenAPI})
	route("/{$}", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: serveDashboard})
	route("/dashboard/", map[string]func(http.ResponseWriter, *http.Request){http.MethodGet: serveDashboardFile})
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no route %s", r.URL.Path))
	})
	g.mux = m
}

// ServeHTTP serves the gateway's API. With Authenticate, every request
// but for the dashboard's files and the OpenAPI document is authenticated
// first (or, for an event stream, by its stream ticket); with RateLimit,
// each is then counted against its client's rate.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(InstanceHeader, g.instance)
	w.Header().Set("Cache-Control", "no-store")
	if g.cfg.auth != nil && !public(r) {
		p, err := g.cfg.auth(r)
		if err != nil {
			// Counted against the address: guesses are limited too.
			if g.rateLimited(w, clientOf(r, nil)) {
				return
			}
			if !errors.Is(err, ErrUnauthenticated) {
				writeError(w, errorf(http.StatusInternalServerError, CodeInternal, "authentication failed: %v", err))
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="dlock gateway"`)
			writeError(w, errorf(http.StatusUnauthorized, CodeUnauthenticated, "%v", err))
			return
		}
		r = withCaller(r, &p)
	}
	if g.rateLimited(w, clientOf(r, caller(r))) {
		return
	}
	g.mux.ServeHTTP(w, r)
}

// public reports whether r needs no credentials: the dashboard's files
// (the page must load to ask for a token) and the OpenAPI document, which
// tell nothing about the locks; and an event stream opened with a stream
// ticket, which carries the principal that fetched it.
func public(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/" || p == "/openapi.yaml" || strings.HasPrefix(p, "/dashboard/"):
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	case p == "/v1/watch" || strings.HasPrefix(p, "/v1/observe/"):
		return r.URL.Query().Get("stream_ticket") != ""
	}
	return false
}

// Instance returns the id this gateway sends in InstanceHeader.
func (g *Gateway) Instance() string { return g.instance }

// Close ends the waits in progress (their polls answer gateway_closing),
// ends the streaming holds with a lost event, and releases every lease the
// gateway holds (not the explicit leases any instance serves: they stay
// with their clients, to renew through another instance or let expire), waiting for the releases at most until ctx ends (the
// backend frees what is left when its TTL runs out). Requests after Close
// are refused with gateway_closing. It returns the releases' errors.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	var all []*held
	for id, h := range g.leases {
		all = append(all, g.endLocked(id, h, CodeClosing))
	}
	var waiting []*waiter
	for _, wt := range g.waiters {
		waiting = append(waiting, wt)
	}
	g.mu.Unlock()
	g.cancel(errClosing)
	// The tickets with no poll: nobody else ends them before they expire.
	for _, wt := range waiting {
		g.abandon(wt)
	}

	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, h := range all {
		wg.Go(func() {
			if err := h.lease.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	g.bg.Wait()
	return errors.Join(errs...)
}

// randomID returns prefix and 128 random bits in hex: an id nobody can
// guess, so that holding it is the capability to renew or release.
func randomID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	return prefix + hex.EncodeToString(b[:])
}

// validID reports whether s has the form randomID(prefix) returns.
func validID(prefix, s string) bool {
	if len(s) != len(prefix)+32 || s[:len(prefix)] != prefix {
		return false
	}
	_, err := hex.DecodeString(s[len(prefix):])
	return err == nil
}

// validFor is how long after recv the lease is known to be valid: until
// the gateway's own deadline for it or the backend's, the sooner.
func validFor(l *dlock.Lease, until, recv time.Time) time.Duration {
	select {
	case <-l.Done():
		return 0
	default:
	}
	if d := l.Deadline(); d.Before(until) {
		until = d
	}
	return max(0, until.Sub(recv))
}
