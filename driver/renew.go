package driver

import "context"

// BatchRenewer is implemented by a Driver that can renew many of its
// grants in one request. A client holding a thousand locks then sends one
// renewal per renewal interval instead of a thousand: dlock's lease engine
// gathers the leases of one Validity on shared ticks and renews all of
// them with one RenewBatch per tick. A Driver without it has each grant
// renewed by its own Grant.Renew.
//
// The engine keeps its guarantee per grant: a grant renewed by a
// RenewBatch counts its validity from the moment RenewBatch was called,
// exactly as a Grant.Renew called at that moment, and a grant whose
// result is an error is handled as if its own Renew had returned that
// error, whatever the others' results.
type BatchRenewer interface {
	// RenewBatch extends each of grants by its Validity from the moment
	// RenewBatch was called (for a LaggingGrant: from its HeardFrom after
	// the call), as Grant.Renew does for one grant. The grants were all
	// obtained from this Driver's Acquire, have the same Validity, and are
	// distinct; the slice is valid only during the call.
	//
	// It returns nil when every grant was renewed. Otherwise it returns
	// one error per grant, in the order of grants: nil for a grant that
	// was renewed, an error satisfying errors.Is(err, ErrNotHeld) for a
	// grant that the server says is gone, and any other error for a
	// grant whose renewal is unknown (retried until its local deadline).
	// A request that failed as a whole gives its error to every grant it
	// carried.
	//
	// It should send one request, or a few when the server limits a
	// request's size (its validity still counts from the call, which is
	// earlier than every request's send time), and return when ctx ends.
	// It must be idempotent, and safe to call concurrently with the
	// grants' other methods.
	RenewBatch(ctx context.Context, grants []Grant) []error
}
