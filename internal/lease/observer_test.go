package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// recordingObserver keeps what an engine reports.
type recordingObserver struct {
	mu      sync.Mutex
	renewed []error
	ends    []End
	errs    []error
	order   []string
	ended   chan struct{} // closed at the first end
}

func newObserver() *recordingObserver { return &recordingObserver{ended: make(chan struct{})} }

func (o *recordingObserver) Renewed(latency, late time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.renewed = append(o.renewed, err)
	o.order = append(o.order, "renewed")
}

func (o *recordingObserver) Ended(end End, at time.Time, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ends = append(o.ends, end)
	o.errs = append(o.errs, err)
	o.order = append(o.order, "ended")
	if len(o.ends) == 1 {
		close(o.ended)
	}
}

func (o *recordingObserver) wait(t *testing.T) {
	t.Helper()
	select {
	case <-o.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("no end reported (watchdog)")
	}
}

// TestObserver_endsOnceWithWhy: every way a lease ends is reported once,
// with the lease's Err, whatever else is tried on it afterwards.
func TestObserver_endsOnceWithWhy(t *testing.T) {
	ctx := context.Background()
	cases := map[string]struct {
		grant func() *fakeGrant
		end   func(e *Engine, g *fakeGrant)
		want  End
	}{
		"released": {func() *fakeGrant { return newFake(time.Hour) }, func(e *Engine, g *fakeGrant) { _ = e.Release(ctx) }, Released},
		"abandoned": {func() *fakeGrant { return newFake(time.Hour) }, func(e *Engine, g *fakeGrant) {
			_ = e.Abandon(ctx, errors.New("closed"))
		}, Abandoned},
		"lost": {func() *fakeGrant { return newFake(time.Hour) }, func(e *Engine, g *fakeGrant) { g.lost <- errors.New("session expired") }, Dropped},
		"limited": {func() *fakeGrant { return newFake(time.Hour) }, func(e *Engine, g *fakeGrant) {
			e.LimitAt(time.Now(), errors.New("maximum hold"))
		}, Limited},
		"expired": {func() *fakeGrant {
			g := newFake(300 * time.Millisecond)
			g.setRenewErr(errors.New("network down"))
			return g
		}, func(e *Engine, g *fakeGrant) {}, Expired},
		"refused": {func() *fakeGrant {
			g := newFake(300 * time.Millisecond)
			g.setRenewErr(driver.ErrNotHeld)
			return g
		}, func(e *Engine, g *fakeGrant) {}, Dropped},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := newObserver()
			g := tc.grant()
			e := Start("k", g, nil, o)
			tc.end(e, g)
			o.wait(t)
			waitDone(t, e)
			_ = e.Release(ctx)
			_ = e.Abandon(ctx, errors.New("again"))
			_ = e.Err()
			o.mu.Lock()
			defer o.mu.Unlock()
			if len(o.ends) != 1 || o.ends[0] != tc.want || o.errs[0] != e.Err() {
				t.Fatalf("ends %v with %v, want one %v with the lease's Err %v", o.ends, o.errs, tc.want, e.Err())
			}
			if end, at, ok := e.Ended(); !ok || end != tc.want || at.IsZero() {
				t.Fatalf("Ended() = %v, %v, %v, want %v at a time", end, at, ok, tc.want)
			}
			if o.order[len(o.order)-1] != "ended" {
				t.Fatalf("reports %v: Renewed after Ended", o.order)
			}
		})
	}
}

// TestObserver_renewalsReported: a refused renewal is reported with its
// error before the end it causes; the failed ones before it too.
func TestObserver_renewalsReported(t *testing.T) {
	g := newFake(300 * time.Millisecond)
	g.setRenewErr(errors.New("network down"))
	o := newObserver()
	Start("k", g, nil, o)
	for range 2 {
		select {
		case <-g.renewed:
		case <-time.After(30 * time.Second):
			t.Fatal("no renewal (watchdog)")
		}
	}
	g.setRenewErr(driver.ErrNotHeld)
	o.wait(t)
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.renewed) < 2 || !errors.Is(o.renewed[len(o.renewed)-1], driver.ErrNotHeld) || errors.Is(o.renewed[0], driver.ErrNotHeld) {
		t.Fatalf("renewals reported %v, want failed ones then the refusal", o.renewed)
	}
	if o.order[len(o.order)-1] != "ended" || o.order[len(o.order)-2] != "renewed" {
		t.Fatalf("reports %v, want the refusal then the end", o.order)
	}
}
