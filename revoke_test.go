package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
)

// unreached is a driver without driver.Revoker whose server must never be
// asked: what the tests below check is refused before a request.
type unreached struct{ t *testing.T }

func (d unreached) Acquire(context.Context, *driver.AcquireRequest) (driver.Grant, error) {
	d.t.Error("Acquire reached the driver")
	return nil, driver.ErrUnavailable
}

func (unreached) Close() error { return nil }

func TestRevoke_unsupportedBackend(t *testing.T) {
	c, err := dlock.NewClient(unreached{t})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Revoke(ctx, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Revoke = %v, want ErrUnsupported", err)
	}
	if _, err := c.Lock(ctx, "k", dlock.WithLockDelay(time.Second)); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Lock with a lock-delay = %v, want ErrUnsupported", err)
	}
	if _, err := dlock.NewClient(unreached{t}, dlock.WithLockDelay(time.Second)); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewClient with a lock-delay = %v, want ErrUnsupported", err)
	}
	// A zero delay asks for nothing the backend lacks.
	if _, err := dlock.NewClient(unreached{t}, dlock.WithLockDelay(0)); err != nil {
		t.Errorf("NewClient with a zero lock-delay = %v", err)
	}
}

func TestRevoke_badArguments(t *testing.T) {
	c, err := dlock.Open(context.Background(), "mem://revoke-bad-arguments")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Revoke(ctx, "k", dlock.RevokeToken(0)); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Revoke with token 0 = %v, want ErrInvalidOption", err)
	}
	if _, err := c.Revoke(ctx, ""); !errors.Is(err, dlock.ErrInvalidKey) {
		t.Errorf("Revoke of an empty key = %v, want ErrInvalidKey", err)
	}
	for _, d := range []time.Duration{-time.Nanosecond, dlock.MaxLockDelay + time.Nanosecond} {
		if _, err := c.Lock(ctx, "k", dlock.WithLockDelay(d)); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Lock with lock-delay %v = %v, want ErrInvalidOption", d, err)
		}
		if _, err := dlock.Open(ctx, "mem://revoke-bad-arguments", dlock.WithLockDelay(d)); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open with lock-delay %v = %v, want ErrInvalidOption", d, err)
		}
	}
	c.Close()
	if _, err := c.Revoke(ctx, "k"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Revoke after Close = %v, want ErrClosed", err)
	}
}
