package redisdlock_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dlockdev/dlock"
)

// NewClientWith builds a client as NewClient does, with opts among its
// Options.ClientOptions.
func (h *harness) NewClientWith(ctx context.Context, t *testing.T, opts ...dlock.Option) (*dlock.Client, error) {
	with := *h
	with.opts.ClientOptions = append(slices.Clip(h.opts.ClientOptions), opts...)
	return with.clientVia(ctx, t, h.srv.Addr())
}

func (h *harness) Backend() string { return "redis" }

// NewClientWith opens a client from the URL, with opts.
func (h *urlHarness) NewClientWith(ctx context.Context, t *testing.T, opts ...dlock.Option) (*dlock.Client, error) {
	c, err := dlock.Open(ctx, h.url, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

func (h *urlHarness) Backend() string { return "redis" }
