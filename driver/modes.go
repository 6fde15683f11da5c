package driver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Every key has one queue. Its entries (holders first, then waiters in
// arrival order) carry a Mode, and the key a Kind and a limit, stored on the
// server with the key's state while anybody holds or waits. One grant rule
// serves every primitive:
//
//	an entry is granted when every entry ahead of it is compatible with it
//	and fewer than limit entries are ahead of it
//
// where Shared is compatible with Shared, Exclusive with nothing, and a
// limit of 0 means no limit. A lock is the case of Exclusive entries (limit
// 1); a semaphore of N permits, of Shared entries with limit N; a
// read-write lock, of Exclusive writers and Shared readers with no limit.
// So grants follow arrival order (a reader behind a waiting writer waits
// behind it), and a release can make several entries grantable at once
// (consecutive readers, or permits): a driver grants, and wakes, exactly
// those. Admits implements the rule for drivers that evaluate it on the
// client (ZooKeeper, etcd); the Redis driver evaluates it in its scripts.

// Kind is the primitive a key serves. Every holder and waiter of a key must
// ask for the same Kind and limit; a request that does not is refused with
// an error satisfying errors.Is(err, ErrKindMismatch) (see KindMismatch),
// and changes nothing on the server. The kind goes with the key's state:
// once nobody holds or waits, the key may be used as another kind.
type Kind uint8

const (
	// KindLock is the exclusive lock of Client.Lock: Exclusive entries,
	// limit 1. It is the zero Kind, and the kind of keys whose state on
	// the server carries none (written before kinds existed).
	KindLock Kind = iota
	// KindSemaphore is a semaphore of limit permits: Shared entries.
	KindSemaphore
	// KindRWMutex is a read-write lock: Exclusive writers, Shared readers,
	// limit 0 (no limit on readers).
	KindRWMutex
	// KindElection is a leader election: Exclusive entries, limit 1, as a
	// lock, whose holder (the leader) publishes a value in its metadata
	// (see Publisher) that observers follow (see Observer).
	KindElection
)

// String returns the kind's name as Inspect and `dlock status` show it:
// "lock", "semaphore" or "rwmutex".
func (k Kind) String() string {
	switch k {
	case KindLock:
		return "lock"
	case KindSemaphore:
		return "semaphore"
	case KindRWMutex:
		return "rwmutex"
	case KindElection:
		return "election"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Mode is what an entry of a queue asks for.
type Mode uint8

const (
	// Exclusive entries are compatible with no other entry: a lock, a
	// writer of a read-write lock.
	Exclusive Mode = iota
	// Shared entries are compatible with each other: a reader of a
	// read-write lock, a permit of a semaphore.
	Shared
)

// String returns "exclusive" or "shared".
func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Admits reports whether an entry of mode m is granted when the entries
// ahead of it in the queue (holders and earlier waiters) are shared Shared
// ones and exclusive Exclusive ones, for a key whose limit is limit (0: no
// limit). It is the grant rule above.
func Admits(limit int, m Mode, shared, exclusive int) bool {
	if exclusive > 0 {
		return false
	}
	if m == Exclusive {
		return shared == 0
	}
	return limit == 0 || shared < limit
}

// KindLabel returns the form in which a driver stores a key's kind and
// limit on the server: "lock", "semaphore/N" or "rwmutex". ParseKindLabel
// reverses it.
func KindLabel(k Kind, limit int) string {
	if k == KindSemaphore {
		return "semaphore/" + strconv.Itoa(limit)
	}
	return k.String()
}

// ParseKindLabel reverses KindLabel. The empty label is a lock's: state
// written before kinds existed. It returns an error for a label that
// KindLabel cannot have produced.
func ParseKindLabel(s string) (k Kind, limit int, err error) {
	switch s {
	case "", "lock":
		return KindLock, 1, nil
	case "rwmutex":
		return KindRWMutex, 0, nil
	case "election":
		return KindElection, 1, nil
	}
	if n, ok := strings.CutPrefix(s, "semaphore/"); ok {
		if limit, err := strconv.Atoi(n); err == nil && limit >= 1 && strconv.Itoa(limit) == n {
			return KindSemaphore, limit, nil
		}
	}
	return 0, 0, fmt.Errorf("unknown kind %q", s)
}

// ErrKindMismatch: a key is held or waited for as another kind (a lock
// and a semaphore, or semaphores of different limits).
var ErrKindMismatch = errors.New("dlock: key is in use as another kind")

// KindMismatch returns the error for a request of kind want (with limit
// wantLimit) on a key that the server says is have, a KindLabel. It names
// both, by the rule in errors.go:
//
//	dlock: key is in use as another kind: it is a semaphore of 3 permits, not a lock
func KindMismatch(have string, want Kind, wantLimit int) error {
	hk, hl, err := ParseKindLabel(have)
	if err != nil {
		return fmt.Errorf("%w: it is of %v, not %s", ErrKindMismatch, err, DescribeKind(want, wantLimit))
	}
	return fmt.Errorf("%w: it is %s, not %s", ErrKindMismatch, DescribeKind(hk, hl), DescribeKind(want, wantLimit))
}

// DescribeKind names a kind for people: "a lock", "a semaphore of 3
// permits", "a read-write lock".
func DescribeKind(k Kind, limit int) string {
	switch k {
	case KindSemaphore:
		if limit == 1 {
			return "a semaphore of 1 permit"
		}
		return "a semaphore of " + strconv.Itoa(limit) + " permits"
	case KindRWMutex:
		return "a read-write lock"
	case KindElection:
		return "an election"
	case KindLock:
		return "a lock"
	}
	return k.String()
}
