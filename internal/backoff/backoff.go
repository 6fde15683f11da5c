// Package backoff spaces out retries for every dlock module: delays that
// double from a first one up to a cap, each jittered so that clients that
// failed together do not retry together, and a wait that ends early with
// its context. It keeps no global state.
//
// A Policy is a value each call site declares once with its own bounds; a
// Backoff counts the retries of one loop:
//
//	b := backoff.New(backoff.Policy{Initial: 5 * time.Millisecond, Max: time.Second})
//	for {
//		err := op(ctx)
//		if !transient(err) {
//			return err
//		}
//		if werr := b.Wait(ctx); werr != nil {
//			return werr
//		}
//	}
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter says how a nominal delay d is drawn into the delay waited.
type Jitter uint8

const (
	// Equal draws from [d/2, d]: retries spread, yet stay at least half
	// the nominal delay apart, so a loop never spins. It is the zero value.
	Equal Jitter = iota
	// Full draws from [0, d]: retries spread the most, and one may follow
	// its failure at once.
	Full
)

// Policy is the bounds of a backoff. A delay is never above Max: the zero
// Policy never waits.
type Policy struct {
	// Initial is the nominal delay before the first retry.
	Initial time.Duration
	// Max caps the nominal delay, which doubles at every retry.
	Max time.Duration
	// Jitter is how each delay is drawn from the nominal one.
	Jitter Jitter
}

// Nominal returns the delay of retry n (0 for the first) before jitter:
// Initial doubled n times, at most Max.
func (p Policy) Nominal(n int) time.Duration {
	d := p.Initial
	if d <= 0 || p.Max <= 0 {
		return 0
	}
	// Doubling stops at the cap, so d cannot overflow, nor the loop
	// outlast 63 doublings.
	for i := 0; i < n && d < p.Max; i++ {
		if d > p.Max/2 {
			return p.Max
		}
		d *= 2
	}
	return min(d, p.Max)
}

// Delay returns the delay of retry n (0 for the first): Nominal(n),
// jittered.
func (p Policy) Delay(n int) time.Duration {
	return p.delay(n, rand.N[time.Duration])
}

// delay is Delay with randN, which returns a value in [0, n), injected.
func (p Policy) delay(n int, randN func(time.Duration) time.Duration) time.Duration {
	d := p.Nominal(n)
	if d <= 0 {
		return 0
	}
	if p.Jitter == Full {
		return randN(d + 1)
	}
	half := d / 2
	return half + randN(d-half+1)
}

// Backoff counts the retries of one loop and waits the delay of each. It is
// not safe for concurrent use: each loop has its own.
type Backoff struct {
	policy Policy
	n      int                               // retries counted since the start or Reset
	randN  func(time.Duration) time.Duration // rand.N; tests replace it
}

// New returns a Backoff whose first delay is p's first.
func New(p Policy) *Backoff {
	return &Backoff{policy: p, randN: rand.N[time.Duration]}
}

// Next returns the delay of the next retry and counts the retry.
func (b *Backoff) Next() time.Duration {
	d := b.policy.delay(b.n, b.randN)
	if b.policy.Nominal(b.n) < b.policy.Max {
		b.n++ // past the cap the count has no use, and cannot overflow
	}
	return d
}

// Wait waits the delay of the next retry (see Next) and returns nil, or
// returns ctx's error as soon as ctx ends. The retry is counted either way.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Reset makes the next delay the first again, after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d and returns nil, or returns ctx's error as soon as ctx
// ends. A ctx that has ended already returns its error even if d <= 0.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
