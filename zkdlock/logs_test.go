package zkdlock_test

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
	"github.com/dlockdev/dlock/internal/testproc"
	"github.com/dlockdev/dlock/internal/testserver"
)

func init() {
	childRoles["zk-outage-holder"] = outageHolder
}

// records is a slog handler that keeps the messages it gets.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

// outageHolder is outageHolder of redisdlock's tests, on ZooKeeper: it
// opens URL (with WithLogger when LOG=1) in a program whose own slog
// default logs debug messages to stderr, holds a key and says "locked";
// after "killed", it waits for the lease to be lost, says "lost"; after
// "restarted", it takes another key once the server answers, says
// "relocked" and then "records" with what its logger got, as JSON.
func outageHolder(ctx context.Context, p *testproc.Peer) error {
	slog.SetLogLoggerLevel(slog.LevelDebug)
	logs := &records{}
	var opts []dlock.Option
	if p.Env("LOG") == "1" {
		opts = append(opts, dlock.WithLogger(slog.New(logs)))
	}
	client, err := dlock.Open(ctx, p.Env("URL"), opts...)
	if err != nil {
		return err
	}
	defer client.Close()
	lease, err := client.Lock(ctx, "outage")
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
	// Nothing announces the new session: try as an application would, a
	// bounded number of times. Another key: if the reconnect saved the
	// session, the lost lease's node goes only some time after it (see
	// TestLease_lostLocallySessionSaved_nodeRemoved), and a TryLock of its
	// key could find it still there.
	for attempt := 1; ; attempt++ {
		lease, err = client.TryLock(ctx, "after-outage")
		if err == nil {
			break
		}
		if !errors.Is(err, dlock.ErrUnavailable) || attempt == 200 {
			return err
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := lease.Unlock(ctx); err != nil {
		return err
	}
	p.Say("relocked")
	logs.mu.Lock()
	defer logs.mu.Unlock()
	b, _ := json.Marshal(logs.msgs)
	p.Say("records %s", b)
	return nil
}

// A Client whose ZooKeeper goes away while it holds a lease, and comes
// back, writes nothing to stderr, even in a program whose slog default
// logger writes debug messages there; with a logger, go-zookeeper's
// messages about the failed reconnects go to it.
func TestClient_serverOutage_nothingOnStderr(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	for _, logged := range []bool{false, true} {
		t.Run(fmt.Sprintf("logger=%v", logged), func(t *testing.T) {
			root := fmt.Sprintf("/outage-%d", time.Now().UnixNano())
			env := []string{"URL=zk://" + srv.Addr() + root + "?session_timeout=1s&tick_time=100ms"}
			if logged {
				env = append(env, "LOG=1")
			}
			h := testproc.Start(t, "zk-outage-holder", env...)
			h.Expect(t, "locked")
			srv.Kill()
			h.Tell(t, "killed")
			h.Expect(t, "lost")
			srv.Restart(t)
			h.Tell(t, "restarted")
			h.Expect(t, "relocked")
			var msgs []string
			if err := json.Unmarshal([]byte(h.Expect(t, "records")), &msgs); err != nil {
				t.Fatalf("records: %v", err)
			}
			h.Wait(t)
			if s := h.Stderr(); s != "" {
				t.Errorf("the holder wrote to stderr:\n%s", s)
			}
			if !logged {
				return
			}
			found := false
			for _, m := range msgs {
				found = found || strings.HasPrefix(m, "zkdlock: failed to connect to "+srv.Addr())
			}
			if !found {
				t.Errorf("the Client's logger got no go-zookeeper message about a failed connection; it got %q", msgs)
			}
		})
	}
}
