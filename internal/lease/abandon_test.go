package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// TestEngine_abandonEndsWithoutRelease: Abandon (Client.Close of a lease in
// its minimum hold) ends the lease with its reason, renews no more and
// leaves the grant on the server; a later Release says not held.
func TestEngine_abandonEndsWithoutRelease(t *testing.T) {
	g := newFake(time.Hour) // no renewal would come during the test anyway
	e := Start("k", g, nil, nil)
	reason := errors.New("closed")
	if err := e.Abandon(context.Background(), reason); err != nil {
		t.Fatalf("Abandon = %v, want nil (the grant is no Abandoner)", err)
	}
	waitDone(t, e)
	if err := e.Err(); !errors.Is(err, reason) {
		t.Fatalf("Err = %v, want the abandon reason", err)
	}
	if err := e.Release(context.Background()); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release after Abandon = %v, want ErrNotHeld", err)
	}
	_ = e.Abandon(context.Background(), errors.New("again")) // no effect, no panic
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released != 0 {
		t.Fatalf("grant released %d times, want 0 (abandoned to the server's TTL)", g.released)
	}
}
