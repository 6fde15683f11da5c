package redisdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testproc/outage"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

func init() {
	childRoles["redis-outage-holder"] = outage.Holder{TTL: time.Second}.Role()
	childRoles["redis-logger"] = redisLogger
	childRoles["redis-open-down"] = openDown
}

// A Client whose server goes away while it holds a lease, and comes back,
// writes nothing to stderr (go-redis would print a failed dial of every
// renewal there), with or without a logger; with one, the logger hears of
// the failed renewals and of the subscription's loss and return.
func TestClient_serverOutage_nothingOnStderr(t *testing.T) {
	for _, logged := range []bool{false, true} {
		t.Run(fmt.Sprintf("logger=%v", logged), func(t *testing.T) {
			srv := testserver.StartRedis(t)
			msgs := outage.Run(t, "redis-outage-holder", srv.URL(), logged, srv.Kill, srv.Restart)
			if !logged {
				return
			}
			for _, want := range []string{"dlock: lease renewal failed", "redisdlock: subscription lost", "redisdlock: subscription restored"} {
				if !outage.HasMessage(msgs, want) {
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
// nothing to stderr (go-redis dials on the first request, and would print
// its failure).
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
	logs := &outage.Records{}
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
	logs.Say(p, "records")
	return nil
}

// After SetRedisLogger, go-redis's messages go to the logger given, and
// nothing to stderr.
func TestSetRedisLogger(t *testing.T) {
	srv := testserver.StartRedis(t)
	h := testproc.Start(t, "redis-logger", "ADDR="+srv.Addr())
	msgs := outage.ExpectRecords(t, h, "records")
	h.Wait(t)
	if s := h.Stderr(); s != "" {
		t.Errorf("the child wrote to stderr:\n%s", s)
	}
	if want := "failed to dial"; !outage.HasMessage(msgs, want) {
		t.Errorf("the logger got %q, want a message with %q", msgs, want)
	}
}
