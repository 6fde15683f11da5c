package gateway

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// maxBuckets bounds the rate limiter's table: past it, the buckets that
// are full (their clients idle for a while) are forgotten, which costs
// them nothing since a new bucket starts full.
const maxBuckets = 10000

// limiter is a token bucket per client (principal or remote address):
// each holds up to burst tokens, refills at rate a second, and a request
// takes one.
type limiter struct {
	rate  float64
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket // guarded by mu
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was counted
}

func newLimiter(rate float64, burst int) *limiter {
	return &limiter{rate: rate, burst: float64(burst), buckets: make(map[string]*bucket)}
}

// take spends one of who's tokens, and reports how long until one is
// there when it has none.
func (l *limiter) take(who string, now time.Time) (ok bool, retry time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[who]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.pruneLocked(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[who] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

func (l *limiter) pruneLocked(now time.Time) {
	for who, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, who)
		}
	}
}

// clientOf names whom a request's limits count against: its principal,
// or without one its remote address.
func clientOf(r *http.Request, p *Principal) string {
	if p != nil {
		return "principal " + p.Name
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "address " + host
}

// rateLimited answers 429 rate_limited, with Retry-After in whole seconds
// (at least one), when who has spent its requests.
func (g *Gateway) rateLimited(w http.ResponseWriter, who string) bool {
	if g.limiter == nil {
		return false
	}
	ok, retry := g.limiter.take(who, time.Now())
	if ok {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(max(1, math.Ceil(retry.Seconds())))))
	writeError(w, errorf(http.StatusTooManyRequests, CodeRateLimited, "%s is over its rate of %g requests a second (bursts of %g): retry after %v", who, g.limiter.rate, g.limiter.burst, retry.Round(time.Millisecond)))
	return true
}

// openStream counts a stream (a hold, a watch, an observe) against its
// client's MaxStreamsPerClient, and returns the function that ends it.
func (g *Gateway) openStream(r *http.Request) (func(), *apiError) {
	if g.cfg.maxStreams == 0 {
		return func() {}, nil
	}
	who := clientOf(r, caller(r))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams[who] >= g.cfg.maxStreams {
		return nil, errorf(http.StatusTooManyRequests, CodeTooManyStreams, "%s has its maximum of %d streams open", who, g.cfg.maxStreams)
	}
	g.streams[who]++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.streams[who]--; g.streams[who] == 0 {
			delete(g.streams, who)
		}
	}, nil
}
