package zkdlock_test

import (
	"context"
	"testing"

	"github.com/dlockdev/dlock"
)

// NewClientWith opens a client as NewClient does, with opts.
func (h *harness) NewClientWith(ctx context.Context, t *testing.T, opts ...dlock.Option) (*dlock.Client, error) {
	return h.open(ctx, t, h.srv.Addr(), opts...)
}

func (h *harness) Backend() string { return "zookeeper" }
