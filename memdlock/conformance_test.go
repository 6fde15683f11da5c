package memdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/memdlock"
)

// harness gives the suite clients of one space of its own, on the real
// clock (the suite waits for real TTLs).
type harness struct {
	first *memdlock.Handle
}

func (h *harness) TTL() time.Duration { return 300 * time.Millisecond }

func (h *harness) NewClient(ctx context.Context, t *testing.T) (*dlock.Client, error) {
	c, _, err := h.first.NewClient()
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

// NewFaultyClient returns a client that the suite cuts off with
// Handle.Disconnect.
func (h *harness) NewFaultyClient(ctx context.Context, t *testing.T) (*dlock.Client, dlocktest.Link, error) {
	c, hc, err := h.first.NewClient()
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	// Back before the Close above, which would wait for its releases.
	t.Cleanup(hc.Reconnect)
	return c, link{hc}, nil
}

// link is a client's path to its space.
type link struct{ h *memdlock.Handle }

func (l link) Blackhole() { l.h.Disconnect() }
func (l link) Restore()   { l.h.Reconnect() }

// RestartServer empties the space.
func (h *harness) RestartServer(ctx context.Context, t *testing.T) error {
	h.first.Restart()
	return nil
}

// DeleteKey removes the key's queue behind its holders' backs.
func (h *harness) DeleteKey(ctx context.Context, key string) error {
	h.first.DeleteKey(key)
	return nil
}

// Leftovers names the key's queue while the space keeps one.
func (h *harness) Leftovers(ctx context.Context, key string) ([]string, error) {
	c, _, err := h.first.NewClient()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	info, err := c.Inspect(ctx, key)
	if err != nil || len(info.Holders)+len(info.Waiters) == 0 {
		return nil, err
	}
	return []string{"queue of " + key}, nil
}

func TestConformance(t *testing.T) {
	dlocktest.Run(t, func(ctx context.Context, t *testing.T) (dlocktest.Harness, error) {
		c, h, err := memdlock.New(nil)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = c.Close() })
		return &harness{first: h}, nil
	})
}
