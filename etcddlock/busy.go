package etcddlock

import (
	"sync"
	"time"
)

// busyFor is how long a Client remembers that it found a key's queue held
// or waited for. A join of a key not seen busy within it first sends a
// small Txn that takes the key only if its queue is empty; the full join,
// which covers every state of the queue, is five times larger, and etcd
// keeps each request in memory until its next snapshot (docs/etcd.md,
// Lock step 2). A key seen busy lately is likely busy again: its joins go
// straight to the full join, so that contended keys pay no extra request.
const busyFor = 10 * time.Second

// busyCap bounds the keys remembered: past it, entries older than busyFor
// go, and if none has, all of them (each then costs at most one more
// request at its next contended join).
const busyCap = 4096

// busyQueues remembers the queues a Client lately found held or waited
// for, and the small Txns it has in flight. Safe for concurrent use.
type busyQueues struct {
	mu       sync.Mutex
	at       map[string]time.Time // queue directory → when last seen busy; guarded by mu
	inFlight map[string]bool      // queue directories with a small Txn sent; guarded by mu
}

// claim reports whether a call may send the small Txn for the queue dir:
// dir was not seen busy within busyFor, and no other call of this Client
// has a small Txn for it in flight. Calls that come together (a burst of
// waiters on one key) are a busy queue: all but the first go straight to
// the full join, which spares etcd a failed Txn each. A true result must
// be followed by unclaim.
func (b *busyQueues) claim(dir string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.at[dir]; (ok && time.Since(t) < busyFor) || b.inFlight[dir] {
		return false
	}
	if b.inFlight == nil {
		b.inFlight = map[string]bool{}
	}
	b.inFlight[dir] = true
	return true
}

// unclaim ends the small Txn that claim allowed.
func (b *busyQueues) unclaim(dir string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inFlight, dir)
}

// saw records the queue dir seen busy (held or waited for) now.
func (b *busyQueues) saw(dir string) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at == nil {
		b.at = map[string]time.Time{}
	}
	if _, ok := b.at[dir]; !ok && len(b.at) >= busyCap {
		for k, t := range b.at {
			if now.Sub(t) >= busyFor {
				delete(b.at, k)
			}
		}
		if len(b.at) >= busyCap {
			clear(b.at)
		}
	}
	b.at[dir] = now
}
