package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/backoff"
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
	// Since is the leader's Entry.Since, by the server's clock: when its
	// term began, or, on a backend that records only when an entry was
	// created (ZooKeeper's node ctime), when it began to campaign. Zero
	// when nobody leads, or when the backend cannot tell (etcd).
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

// Err returns nil while leading, and afterwards why not, as Lease.Err
// (ErrReleased after Resign).
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
	if err := checkValue(value); err != nil {
		return opErr("proclaim", key, err)
	}
	if err := t.l.Err(); err != nil {
		return opErr("proclaim", key, notHeld(key, err))
	}
	p, ok := t.l.grant.(driver.Publisher)
	if !ok {
		return opErr("proclaim", key, fmt.Errorf("%w: the backend cannot publish a leader's value", errors.ErrUnsupported))
	}
	// The lease may end between the check above and the server's: the
	// driver checks again, atomically with the write, so a term that has
	// passed to somebody else never changes the new leader's value.
	if err := p.Publish(ctx, encodeMetadata(t.l.metadata, value)); err != nil {
		return opErr("proclaim", key, err)
	}
	return nil
}

// notHeld is the error of a call on a term that has ended with err (the
// lease's Err): ErrNotHeld, caused by err, reading "dlock: lock not held:
// lease lost: …" and not "dlock: lock not held: lease "k": dlock: lease
// lost: …", which would name the key and the package twice (see the rule
// for messages in package driver).
func notHeld(key string, err error) error {
	text := strings.TrimPrefix(err.Error(), "lease "+keys.Quote(key)+": ")
	text = strings.TrimPrefix(text, "dlock: ")
	return &causedError{text: ErrNotHeld.Error() + ": " + text, errs: []error{ErrNotHeld, err}}
}

// causedError is an error of one category caused by another: errors.Is
// finds both, and the text says each once.
type causedError struct {
	text string
	errs []error
}

func (e *causedError) Error() string   { return e.text }
func (e *causedError) Unwrap() []error { return e.errs }

// checkValue refuses a value that the server would not store as given.
func checkValue(value string) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: value is %d bytes long, the limit is %d", ErrInvalidOption, len(value), MaxValueLen)
	}
	if !utf8.ValidString(value) {
		// JSON would replace the bad bytes: readers would see another value.
		return fmt.Errorf("%w: value is not UTF-8", ErrInvalidOption)
	}
	return nil
}

// Resign gives leadership up: the next candidate, in arrival order, is
// elected at once. Done is closed before the server hears of it, and Err
// then satisfies errors.Is(err, ErrReleased). It returns the errors of
// Lease.Unlock.
func (t *Leadership) Resign(ctx context.Context) error {
	defer t.l.client.forget(t.l)
	if err := t.l.eng.ReleaseWith(ctx, errResigned); err != nil {
		return opErr("resign", t.l.key, err)
	}
	return nil
}

// errResigned is the Err of a resigned term: an ErrReleased that says how.
var errResigned error = &causedError{text: "dlock: leadership resigned", errs: []error{ErrReleased}}

// Campaign waits until the caller leads the election, publishing value, or
// until ctx ends. Candidates are elected in arrival order. It returns the
// errors of Client.Lock, and ErrKindMismatch when the key is in use as a
// lock, a semaphore or a read-write lock. When it returns an error it leaves
// nothing behind on the server.
func (e *Election) Campaign(ctx context.Context, value string, opts ...LockOption) (*Leadership, error) {
	if err := checkValue(value); err != nil {
		return nil, opErr("campaign", e.key, err)
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
// older one after a newer one, nor the same state twice in a row. The
// channel is closed when ctx ends, or at once (after nothing) when the
// backend cannot observe, the key is invalid or the Client is closed.
// Client.Close ends every observation, and waits for it to stop.
//
// A key in use as another kind (a lock, a semaphore, a read-write lock)
// has no leader: Observe sends that, where Leader returns ErrKindMismatch.
// While the server cannot be reached, nothing is sent; the state read
// after it is reached again follows.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo, 1)
	var last LeaderInfo
	var maxToken uint64 // the highest leader's token sent
	sent := false
	send := func(info LeaderInfo) {
		// A read is only as fresh as the server it asks; a leader whose
		// token is below one already sent is a stale read (tokens grow
		// with every term) and is not sent.
		if sent && (sameState(info, last) || (info.HasLeader() && info.Token < maxToken)) {
			return
		}
		last, sent = info, true
		maxToken = max(maxToken, info.Token)
		sendLatest(out, info)
	}
	e.c.follow(ctx, e.key, func(ctx context.Context) error {
		info, err := e.read(ctx)
		if errors.Is(err, ErrKindMismatch) {
			info, err = LeaderInfo{Key: e.key}, nil
		}
		if err == nil {
			send(info)
		}
		return err
	}, func() { close(out) })
	return out
}

// sameState reports whether two states are the same for an observer.
func sameState(a, b LeaderInfo) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Token == b.Token && a.Since.Equal(b.Since) && a.Metadata == b.Metadata
}

// retryPauses spaces out an election's retries: of a failed campaign or
// term (Lead), of a failed watch or read (Observe); 10ms to a second, as
// Lead's doc says, jittered so that the candidates and observers that one
// outage failed do not all come back at once.
var retryPauses = backoff.Policy{Initial: 10 * time.Millisecond, Max: time.Second, Jitter: backoff.Equal}
