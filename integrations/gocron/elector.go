package dlockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dlockdev/dlock"
	"github.com/go-co-op/gocron/v2"
)

// ErrNotLeader is what Elector.IsLeader returns on an instance that does
// not lead: gocron then skips the run.
var ErrNotLeader = errors.New("dlockgocron: not the leader")

// Elector is a gocron.Elector on a dlock Election: it campaigns in the
// background from NewElector until Close, and IsLeader says whether this
// instance leads now. Only the leader's scheduler runs jobs; the others
// stand by, and one of them takes over within the TTL when the leader dies
// (after the old leader's lease has ended: IsLeader returns ErrNotLeader
// there before the successor is elected).
//
// Unlike Locker, the leader runs every job of the scheduler whatever the
// other instances' clocks say; but a job that is running when leadership
// is lost is not stopped (gocron gives it no context for that).
type Elector struct {
	key    string
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	term *dlock.Leadership // current term, nil when not leading; guarded by mu
	err  error             // why Lead ended; guarded by mu
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector starts campaigning in the election key of client with value
// (what Election.Leader shows, e.g. the host name) and opts (dlock.WithTTL,
// dlock.WithMetadata). Call Close to stop and give leadership up.
func NewElector(client *dlock.Client, key, value string, opts ...dlock.LockOption) *Elector {
	ctx, cancel := context.WithCancel(context.Background())
	e := &Elector{key: key, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		err := client.Election(key).Lead(ctx, value, func(ctx context.Context, term *dlock.Leadership) error {
			e.set(term)
			defer e.set(nil)
			<-ctx.Done() // lost, or Close
			return nil
		}, opts...)
		if ctx.Err() == nil {
			e.mu.Lock()
			e.err = err
			e.mu.Unlock()
		}
	}()
	return e
}

func (e *Elector) set(term *dlock.Leadership) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.term = term
}

// IsLeader returns nil while this instance leads, and otherwise an error
// satisfying errors.Is(err, ErrNotLeader) (wrapping, if campaigning has
// stopped for good, why: dlock.ErrKindMismatch, dlock.ErrClosed, …).
func (e *Elector) IsLeader(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.term != nil && e.term.Err() == nil:
		return nil
	case e.err != nil:
		return fmt.Errorf("%w of %q: campaign stopped: %w", ErrNotLeader, e.key, e.err)
	}
	return fmt.Errorf("%w of %q", ErrNotLeader, e.key)
}

// Close stops campaigning, resigns if leading, and waits for that.
func (e *Elector) Close() error {
	e.cancel()
	<-e.done
	return nil
}
