package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/keys"
)

// MaxValueLen is the longest value an election's candidate may publish, in
// bytes.
const MaxValueLen = 4096

// Election elects one leader among the candidates of a key: the
// long-running singleton (one scheduler, one consumer of a partition) that
// must run somewhere in the fleet, but only in one place. It is a lock
// whose holder is the leader and whose waiters are the candidates, served
// in arrival order, so it has every guarantee of the lock: at most one
// leader with a valid Leadership at a time, a dead or paused leader
// replaced after its TTL and only after its Done has closed, and a fencing
// token that grows with every term. The leader publishes a value (its
// address, say) that anybody can read with Leader or follow with Observe.
//
// An Election is a handle: it holds nothing by itself, costs nothing to make
// and is safe for concurrent use. A key that serves as an election cannot
// serve as a lock, semaphore or read-write lock while anybody holds or waits
// for it (ErrKindMismatch).
type Election struct {
	c   *Client
	key string
}

// Election returns the election of key.
func (c *Client) Election(key string) *Election { return &Election{c: c, key: key} }

// Key returns the election's key.
func (e *Election) Key() string { return e.key }

// LeaderInfo is the state of an election: who leads, if anybody.
type LeaderInfo struct {
	// Key is the election's key.
	Key string
	// Value is what the leader published (Campaign, Proclaim); "" when
	// nobody leads.
	Value string
	// Token is the leader's fencing token; it grows with every term. 0
	// when nobody leads.
	Token uint64
	// Since is when the current term began by the server's clock (zero
	// when nobody leads, or when the backend cannot tell).
	Since time.Time
	// Metadata is the leader's, as given with WithMetadata.
	Metadata Metadata
}

// HasLeader reports whether somebody leads.
func (i LeaderInfo) HasLeader() bool { return i.Token != 0 }

// Leadership is a term as leader: a Lease whose published value can change.
// It is lost, and Done closed, as a lock's Lease is (see Lease).
type Leadership struct {
	l *Lease
}

// Lease returns the lease behind the term.
func (t *Leadership) Lease() *Lease { return t.l }

// Token returns the term's fencing token: above every earlier term's.
func (t *Leadership) Token() uint64 { return t.l.Token() }

// Done returns a channel that is closed when leadership is lost or
// resigned, before the server can elect anybody else.
func (t *Leadership) Done() <-chan struct{} { return t.l.Done() }

// Err returns nil while leading, and afterwards why not, as Lease.Err.
func (t *Leadership) Err() error { return t.l.Err() }

// Deadline returns the local time until which leadership is known to last
// even if no renewal succeeds from now on.
func (t *Leadership) Deadline() time.Time { return t.l.Deadline() }

// Proclaim replaces the value the leader publishes. It fails with an error
// satisfying errors.Is(err, ErrNotHeld) once leadership is lost (or
// resigned), and never changes the value of another leader. Observers see
// the new value.
func (t *Leadership) Proclaim(ctx context.Context, value string) error {
	key := t.l.key
	if len(value) > MaxValueLen {
		return opErr("proclaim", key, fmt.Errorf("%w: value is %d bytes long, the limit is %d", ErrInvalidOption, len(value), MaxValueLen))
	}
	if err := t.l.Err(); err != nil {
		return opErr("proclaim", key, fmt.Errorf("%w: %w", ErrNotHeld, err))
	}
	p, ok := t.l.grant.(driver.Publisher)
	if !ok {
		return opErr("proclaim", key, fmt.Errorf("%w: the backend cannot publish a leader's value", errors.ErrUnsupported))
	}
	if err := p.Publish(ctx, encodeMetadata(t.l.metadata, value)); err != nil {
		return opErr("proclaim", key, err)
	}
	return nil
}

// Resign gives leadership up: the next candidate, in arrival order, is
// elected at once. It returns the errors of Lease.Unlock.
func (t *Leadership) Resign(ctx context.Context) error {
	defer t.l.client.forget(t.l)
	if err := t.l.eng.Release(ctx); err != nil {
		return opErr("resign", t.l.key, err)
	}
	return nil
}

// Campaign waits until the caller leads the election, publishing value, or
// until ctx ends. Candidates are elected in arrival order. It returns the
// errors of Client.Lock, and ErrKindMismatch when the key is in use as a
// lock, a semaphore or a read-write lock. When it returns an error it leaves
// nothing behind on the server.
func (e *Election) Campaign(ctx context.Context, value string, opts ...LockOption) (*Leadership, error) {
	if len(value) > MaxValueLen {
		return nil, opErr("campaign", e.key, fmt.Errorf("%w: value is %d bytes long, the limit is %d", ErrInvalidOption, len(value), MaxValueLen))
	}
	opts = append(opts[:len(opts):len(opts)], valueOption(value))
	l, err := e.c.acquire(ctx, "campaign", e.key, electionShape, true, opts)
	if err != nil {
		return nil, err
	}
	return &Leadership{l: l}, nil
}

var electionShape = shape{KindElection, 1, Exclusive}

// valueOption carries Campaign's value to acquire.
type valueOption string

func (o valueOption) applyLock(c *lockConfig) error {
	c.value = string(o)
	return nil
}

// Leader returns who leads the election. It returns an error satisfying
// errors.Is(err, ErrNoLeader) when nobody does, ErrKindMismatch when the key
// is in use as another kind, and the errors of Client.Inspect.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	info, err := e.read(ctx)
	if err != nil {
		return LeaderInfo{}, opErr("leader", e.key, err)
	}
	if !info.HasLeader() {
		return info, opErr("leader", e.key, ErrNoLeader)
	}
	return info, nil
}

// read returns the election's state, without the key in errors.
func (e *Election) read(ctx context.Context) (LeaderInfo, error) {
	if err := keys.Validate(e.key); err != nil {
		return LeaderInfo{}, err
	}
	in, err := e.c.inspector()
	if err != nil {
		return LeaderInfo{}, err
	}
	raw, err := in.Inspect(ctx, e.key)
	if err != nil {
		return LeaderInfo{}, err
	}
	info := convertInfo(raw)
	if len(info.Holders) == 0 && len(info.Waiters) == 0 {
		return LeaderInfo{Key: e.key}, nil
	}
	if info.Kind != KindElection {
		return LeaderInfo{}, driver.KindMismatch(driver.KindLabel(info.Kind, info.Limit), KindElection, 1)
	}
	if len(info.Holders) == 0 {
		return LeaderInfo{Key: e.key}, nil
	}
	h := info.Holders[0]
	return LeaderInfo{Key: e.key, Value: h.Value, Token: h.Token, Since: h.Since, Metadata: h.Metadata}, nil
}

// Observe returns a channel that receives the election's current state at
// once, then every change: a new leader, a new value, and nobody leading
// (a LeaderInfo whose HasLeader is false). Changes are learnt from the
// server's notifications, not by polling. An observer that falls behind
// gets the latest state: it may miss states in between, never receive an
// older one after a newer one. The channel is closed when ctx ends, or at
// once (after nothing) when the backend cannot observe, the key is invalid
// or the Client is closed.
//
// While the server cannot be reached, nothing is sent; the state read
// after it is reached again follows.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo, 1)
	obs, ok := e.c.drv.(driver.Observer)
	if !ok || keys.Validate(e.key) != nil || e.c.checkOpen() != nil {
		close(out)
		return out
	}
	go e.observe(ctx, obs, out)
	return out
}

func (e *Election) observe(ctx context.Context, obs driver.Observer, out chan LeaderInfo) {
	defer close(out)
	ctx, stop := mergeCancel(ctx, e.c.ctx)
	defer stop()
	var last LeaderInfo
	sent := false
	pause := 10 * time.Millisecond
	for ctx.Err() == nil {
		changes, err := obs.Watch(ctx, e.key)
		if err != nil {
			if !sleepCtx(ctx, pause) {
				return
			}
			pause = min(2*pause, time.Second)
			continue
		}
		began := time.Now()
		for range changes {
			info, err := e.read(ctx)
			if err != nil {
				continue // the next notice, or the next watch, reads again
			}
			pause = 10 * time.Millisecond
			if sent && info == last {
				continue
			}
			last, sent = info, true
			// Latest wins: replace a state the observer has not taken yet.
			select {
			case <-out:
			default:
			}
			out <- info
		}
		// The watch ended (the connection broke, the session moved):
		// watch again, but not in a tight loop when it keeps ending.
		if time.Since(began) < time.Second {
			if !sleepCtx(ctx, pause) {
				return
			}
			pause = min(2*pause, time.Second)
		}
	}
}

// sleepCtx waits d, reporting false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
