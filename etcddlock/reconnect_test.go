package etcddlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// A network blip breaks the Client's connection, and the connection
// attempt made during the blip gets no answer (its packets went with the
// blip); the next attempt works. The Client grants a new lease once that
// attempt is abandoned (etcddlock.ReconnectAttemptTimeout), not after
// gRPC's default of 20 s.
func TestOpen_blip_newLeaseAfterBoundedReconnect(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedEtcd(t)
	p := faultproxy.Start(t, srv.Addr(), nil)
	c := openClient(t, ctx, "etcd://"+p.Addr())
	// The first connection after the blip is silent for good.
	before := uint64(p.Accepted())
	var lost atomic.Uint64
	p.Tag(func(f *faultproxy.Frame) bool {
		if f.Conn <= before {
			return false
		}
		lost.CompareAndSwap(0, f.Conn)
		return f.Conn == lost.Load()
	})
	p.HoldTagged(true)
	t.Cleanup(func() { p.HoldTagged(false) })
	blip := time.Now()
	p.Reset()
	// A generous bound, for a loaded machine: gRPC's default gives the
	// silent attempt 20 s.
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	l, err := c.Lock(lctx, "blip/"+t.Name(), dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("no lease %v after the blip: %v", time.Since(blip).Round(time.Millisecond), err)
	}
	t.Logf("new lease %v after the blip (connections: %d before, %d after)", time.Since(blip).Round(time.Millisecond), before, p.Accepted())
	if lost.Load() == 0 {
		t.Error("no connection attempt was silenced: the test proved nothing")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
