package dlock

import (
	"context"
	"slices"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/backoff"
	"github.com/dlockdev/dlock/internal/keys"
)

// Watch returns a channel that receives key's state (as Inspect returns
// it) at once, then after every change: a grant, a release, an expiry, a
// waiter joining or leaving the queue, a leader's new value. Changes are
// learnt from the server's notifications, not by polling; a backend whose
// server sends no notice of some changes shows them with the next change
// it is told of (Redis, see its package documentation). A watcher that
// falls behind gets the latest state: it may miss states in between, never
// receive an older one after a newer one, nor the same state twice in a row
// (states that differ only in their entries' TTL count as the same). Each
// state is the receiver's own.
//
// The channel is closed when ctx ends, or at once (after nothing) when the
// backend cannot observe, the key is invalid or the Client is closed: call
// Inspect first to tell these apart. Client.Close ends every watch, and
// waits for it to stop. While the server cannot be reached, nothing is
// sent; the state read after it is reached again follows.
func (c *Client) Watch(ctx context.Context, key string) <-chan *LockInfo {
	out := make(chan *LockInfo, 1)
	var last *LockInfo
	c.follow(ctx, key, func(ctx context.Context) error {
		raw, err := c.drv.(driver.Inspector).Inspect(ctx, key)
		if err != nil {
			return err
		}
		info := convertInfo(raw)
		if last != nil && sameInfo(info, last) {
			return nil
		}
		last = info
		// The receiver owns what it gets: last is never sent.
		sendLatest(out, cloneInfo(info))
		return nil
	}, func() { close(out) })
	return out
}

// sameInfo reports whether two states of a key are the same for a watcher:
// the same entries in the same order, whatever their TTL left.
func sameInfo(a, b *LockInfo) bool {
	same := func(x, y Entry) bool {
		return x.Token == y.Token && x.Metadata == y.Metadata && x.Since.Equal(y.Since) && x.Mode == y.Mode && x.Value == y.Value
	}
	return a.Key == b.Key && a.Kind == b.Kind && a.Limit == b.Limit &&
		slices.EqualFunc(a.Holders, b.Holders, same) && slices.EqualFunc(a.Waiters, b.Waiters, same)
}

func cloneInfo(in *LockInfo) *LockInfo {
	out := *in
	out.Holders, out.Waiters = slices.Clone(in.Holders), slices.Clone(in.Waiters)
	return &out
}

// sendLatest sends v on out, a channel with a buffer of one that only the
// caller's goroutine sends on, replacing a value the receiver has not taken
// yet: so it never blocks, and the receiver gets the latest value.
func sendLatest[T any](out chan T, v T) {
	select {
	case <-out:
	default:
	}
	out <- v
}

// follow is the loop of Election.Observe and Client.Watch: it watches key
// (driver.Observer) and calls update after each notice, in one goroutine
// that Close waits for, until ctx or the Client ends; then it calls end.
// When the backend cannot observe, the key is invalid or the Client is
// closed, it calls end at once and starts nothing.
//
// update reads the state and sends it if it is new. An error from it is
// retried, after a pause, until a read succeeds: a notice is not repeated,
// and waiting for the next one could leave the watcher with a stale state
// for as long as nothing else changes.
//
// Order: one goroutine reads and sends, so states go out in the order they
// were read; each read follows the notice of the change it may show (the
// driver sends a notice after the watch is in place, and after every
// change), so no change is left unread.
func (c *Client) follow(ctx context.Context, key string, update func(context.Context) error, end func()) {
	obs, ok := c.drv.(driver.Observer)
	_, inspects := c.drv.(driver.Inspector)
	if !ok || !inspects || keys.Validate(key) != nil {
		end()
		return
	}
	// Close waits for watchers as for Lock calls in flight, so that none
	// uses the driver once it is closed: it counts them among those.
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		end()
		return
	}
	c.acquiring.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.acquiring.Done()
		defer end()
		ctx, stop := mergeCancel(ctx, c.ctx)
		defer stop()
		c.followLoop(ctx, obs, key, update)
	}()
}

func (c *Client) followLoop(ctx context.Context, obs driver.Observer, key string, update func(context.Context) error) {
	watchPause, readPause := backoff.New(retryPauses), backoff.New(retryPauses)
	for ctx.Err() == nil {
		changes, err := obs.Watch(ctx, key)
		if err != nil {
			if watchPause.Wait(ctx) != nil {
				return
			}
			continue
		}
		began := time.Now()
		for range changes {
			for update(ctx) != nil {
				if readPause.Wait(ctx) != nil {
					return
				}
			}
			readPause.Reset()
		}
		// The watch ended (the connection broke, the session moved):
		// watch again, but not in a tight loop when it keeps ending.
		if time.Since(began) < time.Second {
			if watchPause.Wait(ctx) != nil {
				return
			}
		} else {
			watchPause.Reset()
		}
	}
}
