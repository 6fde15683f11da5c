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
