package leasewait_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/leasewait"
	"github.com/dlockdev/dlock/memdlock"
)

func TestRenewedPast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _, err := memdlock.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("renewed", func(t *testing.T) {
		at := l.Deadline()
		if err := leasewait.RenewedPast(ctx, l, at); err != nil {
			t.Fatal(err)
		}
		if d := l.Deadline(); !d.After(at) {
			t.Fatalf("RenewedPast returned with the deadline at %v, not after %v", d, at)
		}
	})
	t.Run("watchdog", func(t *testing.T) {
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := leasewait.RenewedPast(done, l, l.Deadline().Add(time.Hour)); !errors.Is(err, context.Canceled) {
			t.Fatalf("RenewedPast with ctx ended: %v, want context.Canceled", err)
		}
	})
	t.Run("lost", func(t *testing.T) {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := leasewait.RenewedPast(ctx, l, l.Deadline().Add(time.Hour)); !errors.Is(err, dlock.ErrReleased) {
			t.Fatalf("RenewedPast of a released lease: %v, want dlock.ErrReleased", err)
		}
	})
}
