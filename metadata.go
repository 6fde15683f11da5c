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

func (m Metadata) encode() []byte {
	b, _ := json.Marshal(m) // cannot fail: strings and an int
	return b
}

func decodeMetadata(b []byte) Metadata {
	var m Metadata
	if len(b) > 0 && json.Unmarshal(b, &m) != nil {
		// Written by something other than dlock: show it rather than lose it.
		m.Note = string(b)
	}
	return m
}

// LockInfo is a snapshot of one key, as returned by Client.Inspect.
type LockInfo struct {
	Key     string
	Kind    Kind    // what the key is; KindLock for a key nobody holds or waits for
	Limit   int     // a semaphore's permits; 1 for a lock, 0 (no limit) for a read-write lock
	Holders []Entry // in the order they were granted; empty when nobody holds the key
	Waiters []Entry // in the order they will be served
}

// Entry is a holder or a waiter in a LockInfo.
type Entry struct {
	Token    uint64        // fencing token of the holder; 0 for a waiter
	Metadata Metadata      // as given with WithMetadata
	Since    time.Time     // when the server recorded the entry; zero if unknown
	TTL      time.Duration // time left before the entry expires unless renewed; negative if unknown
	Mode     Mode          // Exclusive (a lock, a writer) or Shared (a reader, a permit)
}
