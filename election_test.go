package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
)

// The election's behaviour on a server is checked by the conformance suite
// (dlocktest, Election_* scenarios) against every backend. These tests pin
// what package dlock decides alone, before any request: bad input, and a
// backend that cannot observe.

// countingDriver refuses every request and counts them: a call that must
// not reach the server leaves the count at 0.
type countingDriver struct{ calls atomic.Int32 }

func (d *countingDriver) Acquire(context.Context, *driver.AcquireRequest) (driver.Grant, error) {
	d.calls.Add(1)
	return nil, driver.ErrUnavailable
}

func (d *countingDriver) Close() error { return nil }

func newCountingClient(t *testing.T) (*dlock.Client, *countingDriver) {
	t.Helper()
	d := &countingDriver{}
	c, err := dlock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, d
}

// TestCampaign_badValue: a value the server would not store as given is
// refused before any request, naming the call and the key once.
func TestCampaign_badValue(t *testing.T) {
	c, d := newCountingClient(t)
	for _, tc := range []struct{ value, want string }{
		{strings.Repeat("v", dlock.MaxValueLen+1), `campaign "jobs/leader": dlock: invalid option: value is 4097 bytes long, the limit is 4096`},
		{"\xff", `campaign "jobs/leader": dlock: invalid option: value is not UTF-8`},
	} {
		_, err := c.Election("jobs/leader").Campaign(context.Background(), tc.value)
		if !errors.Is(err, dlock.ErrInvalidOption) || err.Error() != tc.want {
			t.Errorf("Campaign: err = %v\nwant %s", err, tc.want)
		}
	}
	if _, err := c.Election("").Campaign(context.Background(), "v"); !errors.Is(err, dlock.ErrInvalidKey) {
		t.Errorf("Campaign of an empty key: err = %v, want ErrInvalidKey", err)
	}
	if n := d.calls.Load(); n != 0 {
		t.Errorf("bad input reached the driver %d times", n)
	}
}

// TestLead_stopsOnPermanentErrors: Lead returns the errors that another
// campaign would only repeat, without calling fn.
func TestLead_stopsOnPermanentErrors(t *testing.T) {
	c, _ := newCountingClient(t)
	fn := func(context.Context, *dlock.Leadership) error {
		t.Error("fn called without leadership")
		return nil
	}
	if err := c.Election("").Lead(context.Background(), "v", fn); !errors.Is(err, dlock.ErrInvalidKey) {
		t.Errorf("Lead of an empty key: err = %v, want ErrInvalidKey", err)
	}
	if err := c.Election("k").Lead(context.Background(), "\xff", fn); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Lead with a bad value: err = %v, want ErrInvalidOption", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Election("k").Lead(ctx, "v", fn); !errors.Is(err, context.Canceled) {
		t.Errorf("Lead with an ended context: err = %v, want context.Canceled", err)
	}
	_ = c.Close()
	if err := c.Election("k").Lead(context.Background(), "v", fn); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Lead on a closed client: err = %v, want ErrClosed", err)
	}
}

// TestObserve_closedAtOnce: Observe's channel closes after nothing when
// the backend cannot observe (no driver.Observer), the key is invalid or
// the client is closed.
func TestObserve_closedAtOnce(t *testing.T) {
	c, _ := newCountingClient(t)
	for _, key := range []string{"jobs/leader", ""} {
		if info, ok := <-c.Election(key).Observe(context.Background()); ok {
			t.Errorf("Observe(%q) without a driver.Observer sent %+v, want its channel closed", key, info)
		}
	}
}

// TestLeader_errors: Leader names the call and the key, and says why.
func TestLeader_errors(t *testing.T) {
	c, _ := newCountingClient(t)
	_, err := c.Election("").Leader(context.Background())
	if !errors.Is(err, dlock.ErrInvalidKey) || !strings.HasPrefix(err.Error(), `leader "": `) {
		t.Errorf("Leader of an empty key: err = %v, want ErrInvalidKey after `leader \"\": `", err)
	}
	_, err = c.Election("jobs/leader").Leader(context.Background())
	if !errors.Is(err, errors.ErrUnsupported) || !strings.HasPrefix(err.Error(), `leader "jobs/leader": `) {
		t.Errorf("Leader on a backend that cannot inspect: err = %v, want ErrUnsupported", err)
	}
}
