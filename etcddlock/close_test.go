package etcddlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// lateGrantDriver is a real etcd driver whose Acquire, once etcd has granted
// the key, holds the grant back until the call's context ends: the grant
// then arrives just as Client.Close runs, which is the race it stages.
type lateGrantDriver struct {
	driver.Driver
	granted chan struct{} // closed when etcd has granted the key
}

func (d *lateGrantDriver) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	close(d.granted)
	<-ctx.Done() // Close cancels the contexts of calls in flight
	return g, nil
}

// A grant that arrives while Close runs is released under Close's deadline:
// etcddlock retries a release for as long as its context lasts, so one
// without a deadline would keep Close from returning while etcd is
// unreachable. The watchdog is 10 TTLs; Close needs one.
func TestClient_Close_grantDuringCloseIsReleasedWithDeadline(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	proxy := dlocktest.NewProxy(t, srv.Addr())
	inner, err := etcddlock.OpenDriverForTest(ctx, "etcd://"+proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	d := &lateGrantDriver{Driver: inner, granted: make(chan struct{})}
	c, err := dlock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	locked := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "close-race", dlock.WithTTL(ttl))
		locked <- err
	}()
	select {
	case <-d.granted:
	case err := <-locked:
		t.Fatalf("Lock returned before the grant: %v", err)
	case <-ctx.Done():
		t.Fatal("etcd did not grant a free key (watchdog)")
	}
	proxy.Blackhole() // the release that follows gets no answer
	defer proxy.Restore()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	watchdog := time.NewTimer(10 * ttl)
	defer watchdog.Stop()
	select {
	case <-closed:
	case <-watchdog.C:
		t.Fatalf("Close still runs after %v: the release of the grant that raced it has no deadline", 10*ttl)
	}
	if err := <-locked; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Lock that raced Close: err = %v, want ErrClosed", err)
	}
}
