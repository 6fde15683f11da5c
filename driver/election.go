package driver

import "context"

// Leader election (dlock.Election) is a queue of KindElection: a lock whose
// holder is the leader and whose waiters are the candidates, in arrival
// order. Two optional interfaces serve it; a driver that lacks them makes
// Election calls fail with errors.ErrUnsupported.

// Publisher is implemented by a Grant whose holder can replace, on the
// server, the metadata stored with its grant (Election's Proclaim).
type Publisher interface {
	// Publish replaces the grant's metadata if the grant is still the
	// caller's, atomically with that check, and returns an error
	// satisfying errors.Is(err, ErrNotHeld) otherwise. It must be
	// idempotent (a retry after a lost reply succeeds while the grant is
	// held), and must never change another owner's metadata. It does not
	// extend the grant's validity.
	Publish(ctx context.Context, metadata []byte) error
}

// Observer is implemented by drivers that the server tells of changes to a
// key's queue (Election's Observe, Client's Watch).
type Observer interface {
	// Watch returns a channel that receives a value soon after any change
	// to key's holders, their metadata or its waiters: a grant, a release,
	// an expiry, a Publish, a waiter joining or leaving the queue. Values
	// may be coalesced (the channel has a buffer of one and a full buffer
	// already says "changed") and may come with no change; the caller
	// reads the state itself with Inspect, after each value. The channel receives one value at once, so that the caller
	// reads the state when the watch is in place, and is closed when ctx
	// ends or the watch cannot go on (the caller may Watch again).
	//
	// Changes must be learnt from server notifications (watches, Pub/Sub),
	// never by polling. Where the server sends no notice of an event (a
	// Redis key expiring without keyspace notifications), the driver may
	// wake at the moment it knows the event is due (a holder's deadline),
	// and must say so in its documentation. So must a driver whose server
	// sends no notice of some changes at all (Redis: waiters joining, and
	// keys of kinds other than elections), which its watch then shows at
	// the next change it is told of.
	Watch(ctx context.Context, key string) (<-chan struct{}, error)
}
