// Package outage runs a lock holder in a child process (package testproc)
// through an outage of its server, so that a backend's tests can check what
// the library prints: the child's real stderr is captured, and must stay
// empty, while the messages meant for the Client's logger are sent back to
// the test.
//
// In the test package, register the role that TestMain runs:
//
//	childRoles["redis-outage-holder"] = outage.Holder{TTL: time.Second}.Role()
//
// and in a test:
//
//	msgs := outage.Run(t, "redis-outage-holder", srv.URL(), true, srv.Kill, srv.Restart)
package outage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testproc"
)

// Key is the key the holder holds through the outage.
const Key = "outage"

// Records is a slog handler that keeps the messages it gets. It is safe for
// concurrent use.
type Records struct {
	mu   sync.Mutex
	msgs []string
}

// Enabled reports true: every level is kept.
func (r *Records) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns r: only messages are kept.
func (r *Records) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r: only messages are kept.
func (r *Records) WithGroup(string) slog.Handler { return r }

// Handle keeps the record's message.
func (r *Records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

// Say sends the parent the messages kept so far, as one line: prefix and
// the messages in JSON, which ExpectRecords reads.
func (r *Records) Say(p *testproc.Peer, prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(r.msgs)
	p.Say("%s %s", prefix, b)
}

// ExpectRecords reads the messages a child sent with Records.Say.
func ExpectRecords(t testing.TB, c *testproc.Child, prefix string) []string {
	t.Helper()
	var msgs []string
	if err := json.Unmarshal([]byte(c.Expect(t, prefix)), &msgs); err != nil {
		t.Fatalf("%s: %v", prefix, err)
	}
	return msgs
}

// HasMessage tells whether one of msgs contains part.
func HasMessage(msgs []string, part string) bool {
	for _, m := range msgs {
		if strings.Contains(m, part) {
			return true
		}
	}
	return false
}

// maxRelocks bounds the holder's tries to take a key after the restart.
const maxRelocks = 200

// Holder is the child's part of Run.
type Holder struct {
	// TTL is the lease length the Client is opened with; zero: the
	// backend's default.
	TTL time.Duration

	// Relock is the key taken after the restart; empty: Key again. A
	// backend whose server keeps the lost lease's entry for a while after
	// the restart needs another key.
	Relock string

	// Try bounds each try to take Relock (a backend whose client waits for
	// a connection as long as the context lets it needs one); zero: only
	// the child's whole run bounds it.
	Try time.Duration
}

// Role returns the testproc role that Run starts. In a program whose slog
// default logger writes debug messages to stderr, it opens the URL given as
// URL (with a Records logger when LOG=1), holds Key and says "locked";
// after "killed", it waits for the lease to be lost, says "lost"; after
// "restarted", it takes Relock once the server answers, says "relocked",
// and then "records" with what its logger got.
func (h Holder) Role() testproc.Role {
	return func(ctx context.Context, p *testproc.Peer) error {
		slog.SetLogLoggerLevel(slog.LevelDebug)
		logs := &Records{}
		var opts []dlock.Option
		if h.TTL != 0 {
			opts = append(opts, dlock.WithTTL(h.TTL))
		}
		if p.Env("LOG") == "1" {
			opts = append(opts, dlock.WithLogger(slog.New(logs)))
		}
		client, err := dlock.Open(ctx, p.Env("URL"), opts...)
		if err != nil {
			return err
		}
		defer client.Close()
		lease, err := client.Lock(ctx, Key)
		if err != nil {
			return err
		}
		p.Say("locked")
		if err := p.Await("killed"); err != nil {
			return err
		}
		select {
		case <-lease.Done():
		case <-ctx.Done():
			return fmt.Errorf("lease not lost while the server was down: %w", ctx.Err())
		}
		p.Say("lost")
		if err := p.Await("restarted"); err != nil {
			return err
		}
		if lease, err = h.relock(ctx, client); err != nil {
			return err
		}
		if err := lease.Unlock(ctx); err != nil {
			return err
		}
		p.Say("relocked")
		logs.Say(p, "records")
		return nil
	}
}

// relock takes Relock with TryLock. Nothing announces that the Client
// reconnected: it tries as an application would, a bounded number of times.
func (h Holder) relock(ctx context.Context, client *dlock.Client) (*dlock.Lease, error) {
	key := h.Relock
	if key == "" {
		key = Key
	}
	for attempt := 1; ; attempt++ {
		lease, err := h.tryLock(ctx, client, key)
		if err == nil {
			return lease, nil
		}
		timedOut := h.Try != 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		if !timedOut && !errors.Is(err, dlock.ErrUnavailable) || attempt == maxRelocks {
			return nil, err
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// tryLock is one try of relock, bounded by Try.
func (h Holder) tryLock(ctx context.Context, client *dlock.Client, key string) (*dlock.Lease, error) {
	if h.Try == 0 {
		return client.TryLock(ctx, key)
	}
	ctx, cancel := context.WithTimeout(ctx, h.Try)
	defer cancel()
	return client.TryLock(ctx, key)
}

// Run starts role, a Holder's, in a child with url (and its logger when
// logged), calls down once it holds its key and up once it has lost the
// lease, and returns the messages its logger got when the child has taken a
// key again and exited. It fails the test if the child wrote anything to
// stderr, or did not get through.
func Run(t *testing.T, role, url string, logged bool, down, up func()) []string {
	t.Helper()
	env := []string{"URL=" + url}
	if logged {
		env = append(env, "LOG=1")
	}
	h := testproc.Start(t, role, env...)
	h.Expect(t, "locked")
	down()
	h.Tell(t, "killed")
	h.Expect(t, "lost")
	up()
	h.Tell(t, "restarted")
	h.Expect(t, "relocked")
	msgs := ExpectRecords(t, h, "records")
	h.Wait(t)
	if s := h.Stderr(); s != "" {
		t.Errorf("the holder wrote to stderr:\n%s", s)
	}
	return msgs
}
