package lease

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// Scheduler renews the leases of one client whose driver is a
// driver.BatchRenewer: the leases of one validity form a group on one
// timer, and each tick of the group renews every lease in it with one
// RenewBatch, so that a client holding a thousand locks sends one request
// per renewal interval instead of a thousand. It is safe for concurrent
// use.
//
// A group's timer fires at the earliest of its leases' next renewals and
// deadlines. A tick ends the leases whose deadline has passed and, when
// one of the others is due, renews with it every lease due within half a
// renewal interval: a lease renewed before it was due is only renewed
// early, and from then on it renews at the same ticks as the others, so
// that a group renews in one batch per interval, two while new leases
// fall in step. No lease waits beyond its own renewal time: a lease
// granted by a request sent long before (a Lock that waited), or retried
// after a failure, brings a tick forward, and that tick renews only the
// few leases due by then, not the whole group. One batch is in flight per
// group at a time; the timer still ends the leases whose deadline passes
// meanwhile.
//
// The safety argument of the package holds for each lease alone: a
// RenewBatch renews each of its grants as a Renew called at the same
// moment would (see driver.BatchRenewer), so each lease's deadline moves
// to a validity after the moment the batch that renewed it was sent, and
// a lease whose result in the batch is an error is handled as if its own
// Renew had failed so (ErrNotHeld ends it alone, another error is
// retried until its deadline), whatever the results of the others.
type Scheduler struct {
	r   driver.BatchRenewer
	clk clock

	mu     sync.Mutex
	groups map[time.Duration]*group // by validity; guarded by mu
}

// NewScheduler returns a Scheduler that renews its leases through r.
func NewScheduler(r driver.BatchRenewer) *Scheduler { return newScheduler(r, realClock{}) }

func newScheduler(r driver.BatchRenewer, clk clock) *Scheduler {
	return &Scheduler{r: r, clk: clk, groups: make(map[time.Duration]*group)}
}

// Start begins renewing g, which the Scheduler's BatchRenewer granted,
// with the other leases of its validity. log and obs may be nil. The
// engine is the same as Start's but for how it is renewed.
func (s *Scheduler) Start(key string, g driver.Grant, log *slog.Logger, obs Observer) *Engine {
	e := new(Engine)
	s.start(e, key, g, log, obs)
	return e
}

// start is Start in e, for StartIn.
func (s *Scheduler) start(e *Engine, key string, g driver.Grant, log *slog.Logger, obs Observer) {
	e.init(key, g, log, obs, s.clk)
	s.mu.Lock()
	grp := s.groups[e.validity]
	if grp == nil {
		grp = &group{s: s, validity: e.validity}
		grp.timer = s.clk.AfterFunc(time.Hour, grp.tick)
		grp.timer.Stop()
		s.groups[e.validity] = grp
	}
	e.grp = grp
	e.idx = len(grp.members)
	grp.members = append(grp.members, e)
	// e is new: nobody else reads its fields yet.
	grp.armBy(e.renewAt)
	s.mu.Unlock()
	e.watch()
}

// group is the leases of one Scheduler with one validity. Its fields are
// guarded by s.mu.
type group struct {
	s        *Scheduler
	validity time.Duration
	members  []*Engine // in no order; an engine's idx is its position
	timer    timer
	at       time.Time // when timer fires; zero when it is stopped
	// sending says a batch is in flight; cancel ends it, when the group
	// empties.
	sending bool
	cancel  context.CancelFunc
	// batch and grants are the batch in flight, kept for the next one.
	batch  []*Engine
	grants []driver.Grant
}

// armBy makes the timer fire no later than at. s.mu must be held.
func (g *group) armBy(at time.Time) {
	if !g.at.IsZero() && !at.Before(g.at) {
		return
	}
	g.at = at
	g.timer.Reset(at.Sub(g.s.clk.Now()))
}

// arm sets the timer for the earliest deadline of the members and, unless
// a batch is in flight, the earliest renewal. An empty group leaves the
// Scheduler. s.mu must be held.
func (g *group) arm() {
	var next time.Time
	for _, e := range g.members {
		e.mu.Lock()
		at := e.deadline
		if !g.sending && e.renewAt.Before(at) {
			at = e.renewAt
		}
		e.mu.Unlock()
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	g.timer.Stop()
	g.at = time.Time{}
	if next.IsZero() {
		if !g.sending {
			// Nothing to wake for: a later lease of this validity starts
			// a new group, and a client's groups do not pile up.
			delete(g.s.groups, g.validity)
		}
		return
	}
	g.armBy(next)
}

// remove takes e out of the members. s.mu must be held.
func (g *group) remove(e *Engine) {
	i := e.idx
	if i < 0 {
		return
	}
	last := len(g.members) - 1
	g.members[i] = g.members[last]
	g.members[i].idx = i
	g.members[last] = nil
	g.members = g.members[:last]
	e.idx = -1
	if len(g.members) == 0 && g.cancel != nil {
		// Nobody is left to benefit from the batch in flight.
		g.cancel()
	}
}

// leave takes e out of the group once it has ended or been released. The
// timer stays as it is: if it was e's, it fires for nothing and is set
// again for the others.
func (g *group) leave(e *Engine) {
	g.s.mu.Lock()
	g.remove(e)
	g.s.mu.Unlock()
}

// tick ends the members whose deadline has passed and, when one of the
// others is due and no batch is in flight, renews in one batch every
// member due within half a renewal interval.
func (g *group) tick() {
	s := g.s
	s.mu.Lock()
	if s.groups[g.validity] != g {
		// Left the Scheduler: its timer fired as it emptied.
		s.mu.Unlock()
		return
	}
	now := s.clk.Now()
	var ended []*Engine
	due := false
	for i := 0; i < len(g.members); {
		e := g.members[i]
		e.mu.Lock()
		gone := e.err != nil || e.released
		if !gone && !now.Before(e.deadline) {
			gone = e.endLocked(Expired, e.expiredErr())
			ended = append(ended, e)
		}
		due = due || (!gone && !now.Before(e.renewAt))
		e.mu.Unlock()
		if gone {
			g.remove(e) // moves the last member to i
			continue
		}
		i++
	}
	var ctx context.Context
	if due && !g.sending {
		ctx = g.startBatch(now.Add(g.validity / 6))
	}
	g.arm()
	s.mu.Unlock()
	for _, e := range ended {
		e.reportEnd()
	}
	if ctx != nil {
		g.send(ctx)
	}
}

// startBatch takes the members due by until into the next batch, and
// returns the context it is sent with: it ends at the latest deadline of
// the batch, when it can no longer help any of them, or when the group
// empties. s.mu must be held.
func (g *group) startBatch(until time.Time) context.Context {
	g.batch, g.grants = g.batch[:0], g.grants[:0]
	var last time.Time
	for _, e := range g.members {
		e.mu.Lock()
		if !e.renewAt.After(until) {
			g.batch = append(g.batch, e)
			g.grants = append(g.grants, e.grant)
			if e.deadline.After(last) {
				last = e.deadline
			}
		}
		e.mu.Unlock()
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	g.sending, g.cancel = true, cancel
	return ctx
}

// send renews the batch in the timer's goroutine and applies each grant's
// result to its own lease.
func (g *group) send(ctx context.Context) {
	s := g.s
	sent := s.clk.Now()
	errs := s.r.RenewBatch(ctx, g.grants)
	latency := s.clk.Now().Sub(sent)

	s.mu.Lock()
	g.cancel()
	g.sending, g.cancel = false, nil
	type result struct {
		e     *Engine
		late  time.Duration
		err   error
		ended bool
	}
	results := make([]result, 0, len(g.batch))
	for i, e := range g.batch {
		var err error
		if errs != nil {
			err = errs[i]
		}
		e.mu.Lock()
		if e.err == nil && !e.released {
			r := result{e: e, late: sent.Sub(e.renewAt), err: err}
			r.ended = e.renewedLocked(sent, err)
			if r.ended {
				g.remove(e)
			}
			results = append(results, r)
		}
		e.mu.Unlock()
		g.batch[i], g.grants[i] = nil, nil
	}
	g.arm()
	s.mu.Unlock()
	for _, r := range results {
		if r.e.obs != nil {
			r.e.reportRenewed(latency, r.late, r.err)
		}
		if r.ended {
			r.e.reportEnd()
		}
	}
}

// clock is the time the Scheduler and its engines run on: the real one,
// or a test's.
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) timer
}

// timer is what clock.AfterFunc returns, as a *time.Timer.
type timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }
