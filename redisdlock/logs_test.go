package redisdlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testproc"
	"github.com/dlockdev/dlock/internal/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

func init() {
	childRoles["redis-outage-holder"] = outageHolder
	childRoles["redis-logger"] = redisLogger
	childRoles["redis-open-down"] = openDown
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

// say sends the parent the messages kept so far, as one JSON line.
func (r *records) say(p *testproc.Peer, prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(r.msgs)
	p.Say("%s %s", prefix, b)
}

// expectRecords reads the messages a child sent with records.say.
func expectRecords(t *testing.T, c *testproc.Child, prefix string) []string {
	t.Helper()
	var msgs []string
	if err := json.Unmarshal([]byte(c.Expect(t, prefix)), &msgs); err != nil {
		t.Fatalf("%s: %v", prefix, err)
	}
	return msgs
}

// hasMessage tells whether one of msgs contains part.
func hasMessage(msgs []string, part string) bool {
	for _, m := range msgs {
		if strings.Contains(m, part) {
			return true
		}
	}
	return false
}

// outageHolder opens URL (with WithLogger when LOG=1), holds a key with a
// short TTL, and says "locked"; after "killed", it waits for the lease to
// be lost while the server is down, says "lost"; after "restarted", it
// takes the key again once the server answers, says "relocked", and, with
// LOG=1, what its logger got.
func outageHolder(ctx context.Context, p *testproc.Peer) error {
	logs := &records{}
	opts := []dlock.Option{dlock.WithTTL(time.Second)}
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
	// Nothing announces that the Client reconnected: try as an
	// application would, a bounded number of times.
	for attempt := 1; ; attempt++ {
		lease, err = client.TryLock(ctx, "outage")
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
	logs.say(p, "records")
	return nil
}

// A Client whose server goes away while it holds a lease, and comes back,
// writes nothing to stderr (go-redis would print a failed dial of every
// renewal there), with or without a logger; with one, the logger hears of
// the failed renewals and of the subscription's loss and return.
func TestClient_serverOutage_nothingOnStderr(t *testing.T) {
	for _, logged := range []bool{false, true} {
		t.Run(fmt.Sprintf("logger=%v", logged), func(t *testing.T) {
			srv := testserver.StartRedis(t)
			env := []string{"URL=" + srv.URL()}
			if logged {
				env = append(env, "LOG=1")
			}
			h := testproc.Start(t, "redis-outage-holder", env...)
			h.Expect(t, "locked")
			srv.Kill()
			h.Tell(t, "killed")
			h.Expect(t, "lost")
			srv.Restart()
			h.Tell(t, "restarted")
			h.Expect(t, "relocked")
			msgs := expectRecords(t, h, "records")
			h.Wait(t)
			if s := h.Stderr(); s != "" {
				t.Errorf("the holder wrote to stderr:\n%s", s)
			}
			if !logged {
				return
			}
			for _, want := range []string{"dlock: lease renewal failed", "redisdlock: subscription lost", "redisdlock: subscription restored"} {
				if !hasMessage(msgs, want) {
					t.Errorf("the Client's logger got no %q; it got %q", want, msgs)
				}
			}
		})
	}
}

// openDown opens URL, where no server listens, and says "refused" when
// that fails with ErrUnavailable.
func openDown(ctx context.Context, p *testproc.Peer) error {
	c, err := dlock.Open(ctx, p.Env("URL"))
	if !errors.Is(err, dlock.ErrUnavailable) {
		if err == nil {
			_ = c.Close()
		}
		return fmt.Errorf("open with no server: %v, want ErrUnavailable", err)
	}
	p.Say("refused")
	return nil
}

// Open of a server that is down fails with ErrUnavailable and writes
// nothing to stderr (its first request used to make go-redis dial, fail
// and print).
func TestOpen_serverDown_nothingOnStderr(t *testing.T) {
	h := testproc.Start(t, "redis-open-down", "URL=redis://"+testserver.Addr(testserver.FreePort(t))+"/0")
	h.Expect(t, "refused")
	h.Wait(t)
	if s := h.Stderr(); s != "" {
		t.Errorf("Open wrote to stderr:\n%s", s)
	}
}

// failingDialer dials the server until fail is set, then refuses.
type failingDialer struct{ fail atomic.Bool }

func (d *failingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.fail.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("refused by the test")}
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// redisLogger calls SetRedisLogger, and makes go-redis fail to dial for a
// Client's TryLock (its subscription stays up, so the Client sends the
// TryLock); then it says what the logger got.
func redisLogger(ctx context.Context, p *testproc.Peer) error {
	logs := &records{}
	redisdlock.SetRedisLogger(slog.New(logs))
	d := &failingDialer{}
	rdb := redis.NewClient(&redis.Options{
		Addr: p.Env("ADDR"), Dialer: d.dial, DialerRetries: 1, MaxRetries: -1,
		ConnMaxLifetime: time.Nanosecond, // every request dials
	})
	defer rdb.Close()
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	d.fail.Store(true)
	if _, err := c.TryLock(ctx, "routed"); !errors.Is(err, dlock.ErrUnavailable) {
		return fmt.Errorf("TryLock with dials refused: %v, want ErrUnavailable", err)
	}
	logs.say(p, "records")
	return nil
}

// After SetRedisLogger, go-redis's messages go to the logger given, and
// nothing to stderr.
func TestSetRedisLogger(t *testing.T) {
	srv := testserver.StartRedis(t)
	h := testproc.Start(t, "redis-logger", "ADDR="+srv.Addr())
	msgs := expectRecords(t, h, "records")
	h.Wait(t)
	if s := h.Stderr(); s != "" {
		t.Errorf("the child wrote to stderr:\n%s", s)
	}
	if want := "failed to dial"; !hasMessage(msgs, want) {
		t.Errorf("the logger got %q, want a message with %q", msgs, want)
	}
}
