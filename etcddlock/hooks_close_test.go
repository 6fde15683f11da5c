package etcddlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// A grant that arrives while Close runs is reported as acquired and then
// as ended by Close, once, though Lock returns ErrClosed: every lease end
// the hooks hear of follows its grant (a gauge of held leases stays ≥ 0).
func TestHooks_grantDuringCloseEndsOnceClosed(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	inner, err := etcddlock.OpenDriverForTest(ctx, "etcd://"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	d := &lateGrantDriver{Driver: inner, granted: make(chan struct{})}
	var mu sync.Mutex
	var events []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, s)
	}
	c, err := dlock.NewClient(d, dlock.WithHooks(dlock.Hooks{
		AcquireDone: func(ctx context.Context, i dlock.AcquireDoneInfo) context.Context {
			note(fmt.Sprintf("done %v %d", i.Outcome, i.Token))
			return ctx
		},
		LeaseEnded: func(ctx context.Context, i dlock.LeaseEndedInfo) {
			note(fmt.Sprintf("ended %v %d", i.Reason, i.Token))
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "hooks-close-race", longTTL)
		locked <- err
	}()
	select {
	case <-d.granted:
	case err := <-locked:
		t.Fatalf("Lock returned before the grant: %v", err)
	case <-ctx.Done():
		t.Fatal("etcd did not grant a free key (watchdog)")
	}
	_ = c.Close()
	if err := <-locked; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Lock that raced Close: err = %v, want ErrClosed", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var token uint64
	if len(events) > 0 {
		_, _ = fmt.Sscanf(events[0], "done acquired %d", &token)
	}
	want := []string{fmt.Sprintf("done acquired %d", token), fmt.Sprintf("ended closed %d", token)}
	if token == 0 || fmt.Sprint(events) != fmt.Sprint(want) {
		t.Fatalf("hooks heard %q, want %q with the grant's token", events, want)
	}
}
