package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// TestHoldAtLeast_outOfRange: a negative minimum hold, or one longer than
// MaxTTL, is refused before the driver is asked anything (the client here
// has no driver to ask: a call that reached it would panic).
func TestHoldAtLeast_outOfRange(t *testing.T) {
	c, err := dlock.NewClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-time.Nanosecond, dlock.MaxTTL + time.Nanosecond} {
		err := c.Do(context.Background(), "k", func(context.Context) error { return nil }, dlock.HoldAtLeast(d))
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Do(HoldAtLeast(%v)) = %v, want ErrInvalidOption", d, err)
		}
		if _, err := c.Lock(context.Background(), "k", dlock.NoWait(), dlock.HoldAtLeast(d)); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Lock(HoldAtLeast(%v)) = %v, want ErrInvalidOption", d, err)
		}
	}
}

// TestHoldAtMost_invalid: a negative maximum hold, one shorter than MinTTL,
// or one shorter than the minimum hold (in either order of the options) is
// refused before the driver is asked anything.
func TestHoldAtMost_invalid(t *testing.T) {
	c, err := dlock.NewClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]dlock.LockOption{
		"negative":           {dlock.HoldAtMost(-time.Nanosecond)},
		"below MinTTL":       {dlock.HoldAtMost(dlock.MinTTL - time.Nanosecond)},
		"below the minimum":  {dlock.HoldAtLeast(2 * time.Second), dlock.HoldAtMost(time.Second)},
		"minimum given last": {dlock.HoldAtMost(time.Second), dlock.HoldAtLeast(2 * time.Second)},
	} {
		err := c.Do(context.Background(), "k", func(context.Context) error { return nil }, opts...)
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("%s: Do = %v, want ErrInvalidOption", name, err)
		}
		if _, err := c.Lock(context.Background(), "k", opts...); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("%s: Lock = %v, want ErrInvalidOption", name, err)
		}
	}
}
