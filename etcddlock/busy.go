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
// for. Safe for concurrent use.
type busyQueues struct {
	mu sync.Mutex
	at map[string]time.Time // queue directory → when last seen busy; guarded by mu
}

// busy reports whether the queue dir was seen busy within busyFor.
func (b *busyQueues) busy(dir string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.at[dir]
	return ok && time.Since(t) < busyFor
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
