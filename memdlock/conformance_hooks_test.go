package memdlock_test

import (
	"context"
	"testing"

	"github.com/dlockdev/dlock"
)

// NewClientWith returns a client of the space as NewClient does, with opts.
func (h *harness) NewClientWith(ctx context.Context, t *testing.T, opts ...dlock.Option) (*dlock.Client, error) {
	c, _, err := h.first.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

func (h *harness) Backend() string { return "mem" }
