package etcddlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testproc"
	"github.com/dlockdev/dlock/internal/testserver"
)

func init() {
	fenceRoles["etcd-outage-holder"] = outageHolder
}

// outageHolder opens URL, holds a key and says "locked"; after "killed",
// it waits for the lease to be lost while the server is down, says "lost";
// after "restarted", it takes another key once the server answers (the lost
// lease's entry lasts until etcd expires its lease), and says "relocked".
func outageHolder(ctx context.Context, p *testproc.Peer) error {
	client, err := dlock.Open(ctx, p.Env("URL"), dlock.WithTTL(2*time.Second))
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
	// Nothing announces the reconnect: try as an application would, a
	// bounded number of times, each bounded (etcd's client waits for a
	// connection as long as the context lets it).
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lease, err = client.TryLock(actx, "after-outage")
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dlock.ErrUnavailable) || attempt == 30 {
			return err
		}
	}
	if err := lease.Unlock(ctx); err != nil {
		return err
	}
	p.Say("relocked")
	return nil
}

// A Client whose etcd goes away while it holds a lease, and comes back,
// writes nothing to stderr: the client Open makes logs to zap.NewNop, and
// gRPC's default logger, which prints errors there, has none to print.
func TestClient_serverOutage_nothingOnStderr(t *testing.T) {
	srv := testserver.StartEtcd(t)
	h := testproc.Start(t, "etcd-outage-holder", "URL="+srv.URL())
	h.Expect(t, "locked")
	srv.Stop()
	h.Tell(t, "killed")
	h.Expect(t, "lost")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	h.Tell(t, "restarted")
	h.Expect(t, "relocked")
	h.Wait(t)
	if s := h.Stderr(); s != "" {
		t.Errorf("the holder wrote to stderr:\n%s", s)
	}
}
