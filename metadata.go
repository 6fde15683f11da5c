package dlock

import (
	"encoding/json"
	"time"
)

// Metadata describes a holder or waiter to people inspecting a lock. It is
// informational: dlock never uses it to decide ownership.
type Metadata struct {
	Host string `json:"host,omitempty"` // default: os.Hostname
	PID  int    `json:"pid,omitempty"`  // default: os.Getpid
	Note string `json:"note,omitempty"` // free text, at most MaxNoteLen bytes
}

// storedMetadata is the document the server keeps with an entry: the
// Metadata and, for an election's candidate, the value it published.
type storedMetadata struct {
	Metadata
	Value string `json:"value,omitempty"`
}

func encodeMetadata(m Metadata, value string) []byte {
	b, _ := json.Marshal(storedMetadata{m, value}) // cannot fail: strings and an int
	return b
}

func decodeMetadata(b []byte) (Metadata, string) {
	var s storedMetadata
	if len(b) > 0 && json.Unmarshal(b, &s) != nil {
		// Written by something other than dlock: show it rather than lose it.
		return Metadata{Note: string(b)}, ""
	}
	return s.Metadata, s.Value
}

// LockInfo is a snapshot of one key, as returned by Client.Inspect.
type LockInfo struct {
	Key     string
	Kind    Kind    // what the key is; KindLock for a key nobody holds or waits for
	Limit   int     // a semaphore's permits; 1 for a lock, 0 (no limit) for a read-write lock
	Holders []Entry // in the order they were granted; empty when nobody holds the key
	Waiters []Entry // in the order they will be served
	// DelayedUntil is, while a lock-delay keeps the key from the next
	// holder (see WithLockDelay), when it ends by the local clock as far
	// as the backend can tell; zero when none is in force. It is for
	// display: approximate, and never used to grant.
	DelayedUntil time.Time
}

// Entry is a holder or a waiter in a LockInfo.
type Entry struct {
	Token    uint64        // fencing token of the holder; 0 for a waiter
	Metadata Metadata      // as given with WithMetadata
	Since    time.Time     // when the server recorded the entry; zero if unknown
	TTL      time.Duration // time left before the entry expires unless renewed; negative if unknown
	Mode     Mode          // Exclusive (a lock, a writer) or Shared (a reader, a permit)
	Value    string        // an election's: the value the leader or candidate published
	// LockDelay is the entry's lock-delay (WithLockDelay); 0 for none or
	// when the backend cannot tell. A holder whose grant ended other than
	// by Unlock stays listed while its delay runs.
	LockDelay time.Duration
}
