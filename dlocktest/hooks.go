package dlocktest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dlockdev/dlock"
)

// OptionClientMaker is implemented by harnesses that can build a client
// with Client options of the suite's choosing (dlock.WithHooks), so that
// the suite can check what the Client reports.
type OptionClientMaker interface {
	// NewClientWith is NewClient with opts given to the Client.
	NewClientWith(ctx context.Context, t *testing.T, opts ...dlock.Option) (*dlock.Client, error)
	// Backend is the name the backend's driver gives (driver.Named), as
	// the hooks report it.
	Backend() string
}

// hookLog keeps the events a Client reports to its hooks.
type hookLog struct {
	mu      sync.Mutex
	events  []any
	changed chan struct{}
}

func (h *hookLog) add(ev any) {
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *hookLog) hooks() dlock.Hooks {
	return dlock.Hooks{
		AcquireDone: func(ctx context.Context, i dlock.AcquireDoneInfo) context.Context { h.add(i); return ctx },
		Renewed:     func(ctx context.Context, i dlock.RenewedInfo) { h.add(i) },
		LeaseEnded:  func(ctx context.Context, i dlock.LeaseEndedInfo) { h.add(i) },
	}
}

// waitHook waits, within the scenario's watchdog, for the first event
// that match accepts, and returns it.
func waitHook[T any](s *suite, h *hookLog, what string, match func(T) bool) T {
	s.t.Helper()
	for {
		h.mu.Lock()
		for _, ev := range h.events {
			if v, ok := ev.(T); ok && match(v) {
				h.mu.Unlock()
				return v
			}
		}
		h.mu.Unlock()
		select {
		case <-h.changed:
		case <-s.ctx.Done():
			s.t.Fatalf("no %s reported (watchdog)", what)
		}
	}
}

// A grant, a renewal and a release are reported to the Client's hooks
// with the backend's name and the lease's token.
func testHooks_grantRenewalReleaseReported(s *suite) {
	m, ok := s.h.(OptionClientMaker)
	if !ok {
		s.t.Skip("backend harness cannot build a client with options (no OptionClientMaker)")
	}
	h := &hookLog{changed: make(chan struct{}, 1)}
	c, err := m.NewClientWith(s.ctx, s.t, dlock.WithHooks(h.hooks()))
	if err != nil {
		s.t.Fatalf("NewClientWith: %v", err)
	}
	backend, key := m.Backend(), s.key()
	l := s.lock(c, key, s.ttl())
	got := waitHook(s, h, "grant", func(i dlock.AcquireDoneInfo) bool { return i.Key == key })
	if got.Outcome != dlock.OutcomeAcquired || got.Token != l.Token() || got.Backend != backend {
		s.t.Fatalf("AcquireDone = %+v, want acquired with token %d on %q", got, l.Token(), backend)
	}
	// The lease renews itself a third of its TTL after the grant.
	renewed := waitHook(s, h, "renewal", func(i dlock.RenewedInfo) bool { return i.Key == key })
	if renewed.Err != nil || renewed.Token != l.Token() || renewed.Backend != backend || renewed.Latency < 0 {
		s.t.Fatalf("Renewed = %+v, want a successful renewal of token %d on %q", renewed, l.Token(), backend)
	}
	s.unlock(l)
	ended := waitHook(s, h, "release", func(i dlock.LeaseEndedInfo) bool { return i.Key == key })
	if ended.Reason != dlock.EndReleased || ended.Token != l.Token() || ended.Backend != backend || !errors.Is(ended.Err, dlock.ErrReleased) {
		s.t.Fatalf("LeaseEnded = %+v, want released, token %d on %q", ended, l.Token(), backend)
	}
}
