// Package driver defines the interfaces that dlock backends implement.
//
// Application code should use package dlock. This package is for the authors of
// backends (redisdlock, zkdlock, etcddlock): dlock validates keys and options,
// runs the one lease engine that renews grants and closes Lease.Done, and
// turns driver results into its public types, so a driver only speaks to its
// server.
package driver

import (
	"context"
	"time"
)

// Driver is one connection (or session) to a lock service. A Driver must be
// safe for concurrent use: dlock calls Acquire from many goroutines at once.
type Driver interface {
	// Acquire takes req.Key for the caller.
	//
	// When req.Wait is false it makes one attempt and returns an error
	// satisfying errors.Is(err, ErrLocked) when another owner holds the key
	// (or live waiters are queued ahead: a fair lock never lets TryLock barge).
	//
	// When req.Wait is true it blocks until the key is granted or ctx is done.
	// Waiting must be driven by server notifications, with at most a bounded
	// fallback poll. When ctx ends first, Acquire must remove every trace of
	// the attempt from the server (queue entries, nodes) before it returns
	// ctx.Err(); if the key was granted in the meantime it must release it, so
	// that the next waiter is not stuck behind a caller that went away.
	//
	// Acquire must be idempotent under retries after lost replies: the owner
	// identity in req.Owner lets a retried request recognise its own grant.
	Acquire(ctx context.Context, req *AcquireRequest) (Grant, error)

	// Close releases the connection. Grants obtained from the Driver are not
	// released by Close; dlock releases them first.
	Close() error
}

// AcquireRequest describes one lock attempt. dlock fills it in after
// validating every field.
type AcquireRequest struct {
	// Key is the user's key, already validated (see dlock.MaxKeyLen).
	Key string
	// Owner is a random, unguessable identity unique to this attempt
	// (32 hex digits). The server stores it with the grant; release and
	// renew act only when it matches.
	Owner string
	// TTL is the lease length requested by the caller (for a FixedTTL
	// driver, its fixed length).
	TTL time.Duration
	// Metadata is an opaque JSON document stored with the grant and queue
	// entry so that inspectors can show who holds and who waits.
	Metadata []byte
	// Wait says whether to block (Lock) or make one attempt (TryLock).
	Wait bool
	// Kind and Limit are what the key is (see Kind): KindLock with limit
	// 1, KindSemaphore with its number of permits, KindRWMutex with 0.
	// The driver stores them with the key's state and refuses, with
	// KindMismatch, a request that disagrees with the stored ones.
	Kind  Kind
	Limit int
	// Mode is what this entry asks for: Exclusive for a lock and a writer,
	// Shared for a reader and a permit. An entry is granted by the grant
	// rule (see Admits); when Wait is false, the attempt fails with
	// ErrLocked unless it would be granted at once with nobody waiting
	// ahead of it.
	Mode Mode
	// LockDelay, when not zero, is how long the key stays granted to
	// nobody else after this entry's grant ends other than by Release:
	// its lease expired on the server (a session ended, a lease lapsed) or
	// an operator revoked it (Revoker). It gives a holder that lost its
	// lease without knowing it (a paused process) time to notice before
	// the next holder starts. The ended entry keeps its place as a holder
	// of its Mode until the delay is over, so a semaphore's permit or a
	// reader's share stays taken as well. A Release never starts a delay.
	//
	// The delay counts by the server's clock from the grant's end where
	// the server keeps time (Redis); elsewhere (ZooKeeper, etcd) from the
	// moment the client of the next grant learned that the entry was gone,
	// which is never earlier than its end. It is at most MaxLockDelay;
	// dlock checks it. A driver stores it with the entry and reports it in
	// Entry.LockDelay.
	LockDelay time.Duration
}

// Grant is a key held on the server. dlock's lease engine calls Renew about
// every Validity/3 and closes the lease when a renewal says the grant is
// gone, when Lost fires, or when the local deadline passes.
//
// Methods may be called concurrently with each other.
type Grant interface {
	// Token is the fencing token: strictly greater than the token of every
	// earlier grant of the same key.
	Token() uint64

	// ValidFrom is a local time that is certainly not later than the moment
	// the server made or last extended the grant, typically the moment the
	// request that produced it was sent. The lease engine counts Validity
	// from it, less a margin for clock drift, to decide when the lease must
	// be considered lost, so an early value is safe and a late one is not.
	ValidFrom() time.Time

	// Validity is how long, by the server's clock, the server keeps the
	// grant after ValidFrom and after the start of every successful Renew.
	Validity() time.Duration

	// Renew extends the grant by Validity from the moment it was called
	// (for a LaggingGrant: from its HeardFrom after the call). It
	// returns an error satisfying errors.Is(err, ErrNotHeld) when the server
	// says the grant is gone; any other error is taken as transient and
	// retried until the local deadline. Renew must be idempotent.
	Renew(ctx context.Context) error

	// Release gives the key up, waking the next waiter. It returns ErrNotHeld
	// when the caller no longer owns the key; it must never release a grant
	// that belongs to someone else.
	Release(ctx context.Context) error

	// Lost returns a channel that receives the reason once if the backend
	// learns by itself that the grant is gone (a session expired, the key
	// was deleted). It may return nil when the backend has no such signal.
	Lost() <-chan error
}

// LaggingGrant is implemented by a Grant whose server may learn of a
// request only some time after answering it, so that the moment its
// validity counts from can be earlier than the start of the request that
// made or renewed it: a ZooKeeper follower answers its clients itself, and
// the leader, which alone expires sessions, hears of them only with the
// follower's next ping reply.
//
// For such a grant the lease engine counts Validity from the earlier of
// HeardFrom and ValidFrom (at the start) or the renewal's start (after each
// successful Renew), and uses ValidFrom and the renewals' starts only to
// schedule renewals. Other grants are unaffected.
type LaggingGrant interface {
	Grant

	// HeardFrom returns a local time that is certainly not later than the
	// last moment the server that expires the grant is known to have heard
	// from its owner. The engine calls it after Start and after every
	// successful Renew. It may return the zero time when nothing is known
	// (the lease then ends at its current deadline unless a later call
	// knows better).
	HeardFrom() time.Time
}

// LostNotifier is implemented by a Grant that can call a function when
// the backend learns by itself that the grant is gone, the news its Lost
// channel carries. The lease engine then registers a function with
// AfterLost instead of waiting on the channel, which would take a
// goroutine for every held lease.
type LostNotifier interface {
	Grant

	// AfterLost arranges for f to be called once, in a goroutine of its
	// own, with the reason Lost would carry, when the backend learns that
	// the grant is gone; at once if it has learned it already. The engine
	// calls it once, right after the grant, and never reads Lost then. f
	// may still be called after the grant's Release, which the engine
	// ignores.
	AfterLost(f func(reason error))
}

// Abandoner is implemented by a Grant that the server would not free by
// itself once nobody renews it: a ZooKeeper lock node lives as long as its
// session, and a session that outlives the Client (zkdlock.New on the
// caller's connection) may live for ever. dlock leaves a grant to expire
// instead of releasing it only in Client.Close, for a lease in its minimum
// hold (dlock.HoldAtLeast); it then calls Abandon, after the last Renew,
// and never Release.
type Abandoner interface {
	Grant

	// Abandon settles a grant left to expire, within ctx: it does what
	// the server will not do by itself (deleting a node that would outlive
	// the Client), and stops what the grant runs in the background.
	Abandon(ctx context.Context) error
}

// FixedTTL is implemented by drivers whose leases all have one length, set
// by the connection rather than by each request, such as ZooKeeper's
// session timeout. dlock then refuses a requested TTL that differs from it
// (with ErrInvalidOption) instead of letting the caller believe in a lease
// length the server does not keep.
type FixedTTL interface {
	// FixedTTL returns the length of every lease of the driver, and a
	// hint for the error that refuses another: what sets the length and
	// how to change it (for example "zk:// leases last the session
	// timeout, 10s here; set session_timeout in the URL instead").
	FixedTTL() (ttl time.Duration, hint string)
}

// Inspector is implemented by drivers that can report who holds a key and
// who waits for it. dlock.Client.Inspect and List use it.
type Inspector interface {
	// Inspect returns the state of one key. A key nobody holds or waits for
	// yields a LockInfo with no Holders and no Waiters, not an error.
	Inspect(ctx context.Context, key string) (*LockInfo, error)
	// List returns the keys that start with prefix and are held or waited
	// for, sorted by key.
	List(ctx context.Context, prefix string) ([]*LockInfo, error)
}

// LockInfo is a snapshot of one key.
type LockInfo struct {
	Key     string
	Kind    Kind    // KindLock for a key nobody holds or waits for
	Limit   int     // as in AcquireRequest
	Holders []Entry // in the order they were granted; empty when the key is free
	Waiters []Entry // in the order they will be served
	// DelayedUntil is, when a lock-delay is in force (see
	// AcquireRequest.LockDelay), the time by the local clock when it ends
	// as far as the driver can tell; zero when no delay is in force. It is
	// for display: grants never rely on it.
	DelayedUntil time.Time
}

// Entry is a holder or a waiter.
type Entry struct {
	// Token is the holder's fencing token; 0 for waiters.
	Token uint64
	// Metadata is the document given with the request.
	Metadata []byte
	// Since is when the entry was created by the server's clock; zero when
	// the backend cannot tell.
	Since time.Time
	// TTL is how long the entry lives without renewal; negative when the
	// backend cannot tell.
	TTL time.Duration
	// Mode is what the entry holds or waits for.
	Mode Mode
	// LockDelay is the entry's lock-delay (AcquireRequest.LockDelay); 0
	// for none or when the backend cannot tell.
	LockDelay time.Duration
}
