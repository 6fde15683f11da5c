package main

import (
	"time"

	"github.com/dlockdev/dlock"
)

// jsonLock is the --json form of one key; docs/cli.md documents it. It
// grew compatibly with the kinds: kind, limit, holders and each entry's
// mode are new; holder, the only field that held a holder before, is
// still there and is the first of holders (for a lock, its one holder),
// so that `jq .holder.token` and a test of `holder != null` for "is it
// held" keep working on every kind. New consumers read holders.
type jsonLock struct {
	Key     string      `json:"key"`
	Kind    string      `json:"kind"`    // "lock", "semaphore", "rwmutex", "election"
	Limit   int         `json:"limit"`   // permits; 1 for a lock, 0 (no limit) for a read-write lock
	Holder  *jsonEntry  `json:"holder"`  // holders[0]; null when nobody holds the key
	Holders []jsonEntry `json:"holders"` // in the order they were granted
	Waiters []jsonEntry `json:"waiters"` // in the order they will be served
	// DelayedUntil: while a lock-delay keeps the key from everyone, when
	// it ends (approximately); omitted when none is in force.
	DelayedUntil *time.Time `json:"delayed_until,omitempty"`
}

type jsonEntry struct {
	Mode      string     `json:"mode"`            // "exclusive" or "shared"
	Token     uint64     `json:"token,omitempty"` // holders only
	Host      string     `json:"host,omitempty"`
	PID       int        `json:"pid,omitempty"`
	Note      string     `json:"note,omitempty"`
	Value     string     `json:"value,omitempty"`       // an election's candidate: the value it published
	Since     *time.Time `json:"since,omitempty"`       // omitted when the backend cannot tell
	TTLLeftMS *int64     `json:"ttl_left_ms,omitempty"` // omitted when the backend cannot tell
	// LockDelayMS is the entry's lock-delay (dlock run --lock-delay);
	// omitted for none.
	LockDelayMS int64 `json:"lock_delay_ms,omitempty"`
}

// toJSONEntry is the --json form of a holder or waiter.
func toJSONEntry(e dlock.Entry) jsonEntry {
	j := jsonEntry{Mode: e.Mode.String(), Token: e.Token, Host: e.Metadata.Host, PID: e.Metadata.PID, Note: e.Metadata.Note, Value: e.Value, LockDelayMS: e.LockDelay.Milliseconds()}
	if !e.Since.IsZero() {
		s := e.Since
		j.Since = &s
	}
	if e.TTL >= 0 {
		ms := e.TTL.Milliseconds()
		j.TTLLeftMS = &ms
	}
	return j
}

func toJSON(in *dlock.LockInfo, now time.Time) jsonLock {
	conv := toJSONEntry
	out := jsonLock{Key: in.Key, Kind: in.Kind.String(), Limit: in.Limit, Holders: []jsonEntry{}, Waiters: []jsonEntry{}}
	if !in.DelayedUntil.IsZero() {
		d := in.DelayedUntil
		out.DelayedUntil = &d
	}
	for _, h := range in.Holders {
		out.Holders = append(out.Holders, conv(h))
	}
	if len(out.Holders) > 0 {
		h := out.Holders[0]
		out.Holder = &h
	}
	for _, w := range in.Waiters {
		out.Waiters = append(out.Waiters, conv(w))
	}
	return out
}
