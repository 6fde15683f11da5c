package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/dlockdev/dlock/internal/keys"
)

// multiOp names LockAll and TryLockAll in errors.
const multiOp = "lockall"

// LockAll takes every key in keys, or none: a job that touches two
// resources locks both without deadlocking against a job that locks them
// in the other order. It waits until all are held, or until ctx ends.
//
// It takes the keys one at a time in increasing byte order (the order of
// sort.Strings), whatever the order of keys, waiting in each key's queue
// like Lock. Every LockAll uses that one order, so callers asking for
// overlapping sets in any order never wait for each other in a cycle. A
// caller that already holds a lock taken otherwise (by Lock, Do or another
// LockAll) while it calls LockAll gets the same guarantee only if that
// key sorts before every key it asks for here: otherwise it may deadlock
// with another caller, as with any two locks taken in different orders.
//
// Each key is a lock, as Client.Lock takes it; the options apply to every
// key (WithTTL gives every lease the same TTL). The leases are those of
// Lock, renewed and lost independently: see MultiLease.
//
// Before anything is taken it checks every key and option, and returns an
// error satisfying errors.Is with ErrInvalidKey for an empty list, an
// invalid key, or a key given twice (which would wait for itself: locks
// are not reentrant), naming the key; ErrInvalidOption for a bad option;
// ErrReentrant when ctx comes from a Do of one of the keys on this
// Client. Then it may return, naming the key it was taking, ErrClosed
// after Close, ErrUnavailable, ErrKindMismatch for a key in use as
// another kind, or ctx.Err() wrapped.
//
// When it returns an error it leaves nothing held or queued: it releases
// the keys it had taken, in parallel, even when ctx has ended (each
// release waits at most the lease's TTL; a release the server does not
// confirm, whose error is joined to the returned one, is undone by the
// server when the TTL runs out).
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...LockOption) (*MultiLease, error) {
	return c.acquireAll(ctx, keys, true, opts)
}

// TryLockAll takes every key in keys if each is free and nobody waits for
// it, and otherwise returns at once with an error satisfying
// errors.Is(err, ErrLocked) that names the first key it could not take,
// having released the keys it took before. It takes them in the order of
// LockAll, so that of two TryLockAll calls of the same free keys one wins
// (the other fails at the first key) rather than each taking a key and
// both failing. It returns the same other errors as LockAll.
func (c *Client) TryLockAll(ctx context.Context, keys []string, opts ...LockOption) (*MultiLease, error) {
	return c.acquireAll(ctx, keys, false, opts)
}

// acquireAll serves LockAll (wait) and TryLockAll.
//
// Why taking the keys in one global order rules out deadlock on queues
// that serve waiters in arrival order. Draw the wait-for graph: a caller P
// waiting in the queue of key k has an edge to every entry ahead of it in
// that queue, the holders of k and the waiters that arrived before it,
// since with FIFO queues P is granted only after all of them. Give a
// waiting caller the rank (k, its position in k's queue). Follow an edge
// P -> Q:
//   - Q holds k. Q took k and is now either running (it waits for nothing,
//     and releases after its work) or waiting for a key k' it takes after
//     k, so k' > k: the rank's key goes up.
//   - Q waits for k too, ahead of P: same key, and a position nearer the
//     head. A queue's order never changes (entries leave, none overtakes),
//     so this holds as long as the edge exists.
//
// So every edge goes to a strictly higher rank in the order "key up, then
// position towards the head", and no path can return to where it started:
// there is no cycle. The finite graph then has a caller with no edge out:
// one that waits for nothing, or is first in line for a key nobody holds,
// whom the grant rule admits at once. Every caller therefore progresses,
// given that holders end their work or lose their leases (a dead holder's
// entries go within its TTL). Duplicates are refused because a second
// entry of a key the caller holds would wait behind the caller itself, an
// edge P -> P (ErrReentrant rejects the same inside a Do). A TryLockAll
// waits for nothing, so it has no edges: it only delays others for the
// round trips it holds a key, and gives up at the first refusal.
func (c *Client) acquireAll(ctx context.Context, list []string, wait bool, opts []LockOption) (*MultiLease, error) {
	order, err := c.checkAll(ctx, list, opts)
	if err != nil {
		return nil, err
	}
	taken := make([]*Lease, len(list)) // by the caller's position
	for _, i := range order {
		l, err := c.acquire(ctx, multiOp, list[i], lockShape, wait, opts)
		if err != nil {
			return nil, errors.Join(err, releaseTaken(ctx, taken))
		}
		taken[i] = l
	}
	return newMultiLease(taken), nil
}

// checkAll checks everything that can be checked without the server, so
// that bad input leaves nothing there, and returns the caller's positions
// in the order in which the keys are taken.
func (c *Client) checkAll(ctx context.Context, list []string, opts []LockOption) ([]int, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: %w: no keys given", multiOp, ErrInvalidKey)
	}
	for _, k := range list {
		if err := keys.Validate(k); err != nil {
			return nil, opErr(multiOp, k, err)
		}
	}
	order := make([]int, len(list))
	for i := range order {
		order[i] = i
	}
	// Stable, so that equal keys keep the caller's positions in order.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(list[a], list[b]) })
	for j := 1; j < len(order); j++ {
		if a, b := order[j-1], order[j]; list[a] == list[b] {
			return nil, opErr(multiOp, list[a], fmt.Errorf("%w: given twice, at positions %d and %d of the list (locks are not reentrant)", ErrInvalidKey, a, b))
		}
	}
	cfg := c.defaults
	for _, o := range opts {
		if err := o.applyLock(&cfg); err != nil {
			return nil, fmt.Errorf("%s %s: %w", multiOp, quoteList(list), err)
		}
	}
	if err := checkFixedTTL(c.drv, &cfg); err != nil {
		return nil, fmt.Errorf("%s %s: %w", multiOp, quoteList(list), err)
	}
	for _, k := range list {
		if c.holdsInContext(ctx, k) {
			return nil, opErr(multiOp, k, ErrReentrant)
		}
	}
	return order, nil
}

// releaseTaken releases the leases an acquireAll took before it failed, in
// parallel, each within its TTL even if ctx has ended (after a TTL the
// server frees the key by itself), as Do unlocks. It returns the releases
// the server did not confirm; ErrNotHeld is no news to a caller who is
// told it got nothing (Close may have released the leases first).
func releaseTaken(ctx context.Context, taken []*Lease) error {
	ctx = context.WithoutCancel(ctx)
	errs := make([]error, len(taken))
	var wg sync.WaitGroup
	for i, l := range taken {
		if l == nil {
			continue
		}
		wg.Go(func() {
			uctx, cancel := context.WithTimeout(ctx, l.ttl)
			defer cancel()
			if err := l.Unlock(uctx); err != nil && !errors.Is(err, ErrNotHeld) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// quoteList renders a key list for an error message, cut after a few keys.
func quoteList(list []string) string {
	const show = 4
	q := make([]string, 0, show+1)
	for i, k := range list {
		if i == show {
			q = append(q, fmt.Sprintf("… (%d keys)", len(list)))
			break
		}
		q = append(q, keys.Quote(k))
	}
	return "[" + strings.Join(q, " ") + "]"
}
