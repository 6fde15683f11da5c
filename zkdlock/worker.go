package zkdlock

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// go-zookeeper's requests block and cannot be cancelled, so call runs each
// on another goroutine and waits for it or for ctx. Starting a goroutine
// and a result channel per request costs three allocations and a stack
// that grows again each time; here a request is a pending, reused once its
// result has been read, and runs on a worker, a goroutine kept for the
// next request for a while.

// A pending is one request for call: f (or f0), run by a worker, and its
// result. It is kept for a later request of the same result type once
// awaitCall has read its result, or, when it gave up on it, once f
// returns.
type pending[T any] struct {
	f        func() (T, error)
	f0       func() error // call0's request, instead of f
	inflight *sync.WaitGroup
	v        T
	err      error
	// done receives once f has returned, unless awaitCall gave up first
	// (state): buffered, so that run never blocks.
	done  chan struct{}
	state atomic.Uint32 // pendingRunning, then pendingDone or pendingAbandoned
	pool  *sync.Pool
}

const (
	pendingRunning uint32 = iota
	pendingDone
	pendingAbandoned
)

// pendingPools holds a sync.Pool of *pending[T] for each result type T.
var pendingPools sync.Map // reflect.Type → *sync.Pool

// newPending returns an unused pending for f or f0.
func newPending[T any](inflight *sync.WaitGroup, f func() (T, error), f0 func() error) *pending[T] {
	t := reflect.TypeFor[T]()
	pl, ok := pendingPools.Load(t)
	if !ok {
		pl, _ = pendingPools.LoadOrStore(t, new(sync.Pool))
	}
	pool := pl.(*sync.Pool)
	p, ok := pool.Get().(*pending[T])
	if !ok {
		p = &pending[T]{done: make(chan struct{}, 1), pool: pool}
	}
	p.f, p.f0, p.inflight = f, f0, inflight
	if inflight != nil {
		inflight.Add(1)
	}
	return p
}

// run runs the request; a worker calls it.
func (p *pending[T]) run() {
	if p.f0 != nil {
		p.err = p.f0()
	} else {
		p.v, p.err = p.f()
	}
	if p.inflight != nil {
		p.inflight.Done()
	}
	if !p.state.CompareAndSwap(pendingRunning, pendingDone) {
		p.recycle() // nobody waits for it any more
		return
	}
	p.done <- struct{}{}
}

// awaitCall waits for p's result as call does, and recycles p unless it
// gives up on it first.
func awaitCall[T any](ctx context.Context, p *pending[T], timeout time.Duration) (T, error) {
	var expired <-chan time.Time
	if timeout > 0 {
		timer := getTimer(timeout)
		defer putTimer(timer)
		expired = timer.C
	}
	var gaveUp error
	select {
	case <-p.done:
	case <-ctx.Done():
		gaveUp = ctx.Err()
	case <-expired:
		gaveUp = errNoAnswer
	}
	if gaveUp != nil {
		if p.state.CompareAndSwap(pendingRunning, pendingAbandoned) {
			var zero T
			return zero, gaveUp // run recycles p
		}
		<-p.done // the result is in: take it, as if it had come first
	}
	v, err := p.v, p.err
	p.recycle()
	return v, err
}

// recycle clears p and keeps it for a later request.
func (p *pending[T]) recycle() {
	var zero T
	p.f, p.f0, p.inflight, p.v, p.err = nil, nil, nil, zero, nil
	p.state.Store(pendingRunning)
	p.pool.Put(p)
}

// runner is what a worker runs: a pending.
type runner interface{ run() }

// idleWorkers hands a request to a worker waiting for one.
var idleWorkers = make(chan runner)

// defaultWorkerIdle is how long a worker waits for another request before
// it exits: a busy Client's next request comes much sooner.
const defaultWorkerIdle = 500 * time.Millisecond

// workerIdle is defaultWorkerIdle, in nanoseconds: a variable only so that
// a test can show that Close, not this wait, stops the workers.
var workerIdle atomic.Int64

// The workers are the process's, shared by its Clients; once the last
// Client has closed, none is left waiting for a request (a goroutine leak
// check run right after Close finds none). openClients counts the drivers
// made and not yet closed; workersQuit is closed, and replaced, whenever
// that count falls to zero.
var (
	openClients atomic.Int64
	workersQuit atomic.Pointer[chan struct{}]
)

func init() {
	workerIdle.Store(int64(defaultWorkerIdle))
	q := make(chan struct{})
	workersQuit.Store(&q)
}

// clientOpened counts a new driver; clientClosed undoes it, at its Close.
func clientOpened() { openClients.Add(1) }

func clientClosed() {
	if openClients.Add(-1) != 0 {
		return
	}
	q := make(chan struct{})
	close(*workersQuit.Swap(&q))
}

// dispatch runs r on an idle worker, or on a new one when none is idle.
func dispatch(r runner) {
	select {
	case idleWorkers <- r:
	default:
		go work(r)
	}
}

// work runs r, then whatever dispatch hands it, until it has been idle for
// workerIdle or no Client is open.
func work(r runner) {
	idle := time.NewTimer(time.Duration(workerIdle.Load()))
	defer idle.Stop()
	for {
		r.run()
		// Loaded before the count is read: a last Close after the load
		// closes this channel; one before it leaves the count at zero.
		quit := *workersQuit.Load()
		if openClients.Load() <= 0 {
			return
		}
		idle.Reset(time.Duration(workerIdle.Load()))
		select {
		case r = <-idleWorkers:
		case <-idle.C:
			return
		case <-quit:
			return
		}
	}
}

// timers keeps the stopped timers that bounded waits for an answer, for
// the next wait: a new one is three allocations, and a release waits with
// one.
var timers sync.Pool

// getTimer returns a timer that fires after d; putTimer gives it back.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it for getTimer, its channel empty (which
// only a main module older than go 1.23, with its buffered timer
// channels, needs).
func putTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}
