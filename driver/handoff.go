package driver

import "time"

// GrantRef names a held grant to a Driver other than the one that acquired
// it: another connection to the same server, in this process or another.
// With it, Reattacher rebuilds a Grant that renews and releases the grant
// on the server, so that the grant outlives the process that acquired it
// for as long as somebody renews it.
//
// The fields name the grant and grant nothing: the server acts only when
// Owner still holds Key with Token. Owner is the capability (128 random
// bits): whoever holds a GrantRef can renew and release the grant.
type GrantRef struct {
	// Key, Owner, Kind, Limit and Mode are the AcquireRequest's; TTL is
	// the grant's Validity.
	Key   string
	Owner string
	TTL   time.Duration
	Kind  Kind
	Limit int
	Mode  Mode
	// Token is the grant's Token.
	Token uint64
	// Data is what else the backend needs, from Referrer.Ref; opaque to
	// everything but the driver.
	Data []byte
}

// Referrer is implemented by a Grant that a Reattacher on the same server
// can rebuild from a GrantRef.
type Referrer interface {
	Grant

	// Ref returns what the grant's GrantRef needs beyond the request's
	// fields and the token, and reports whether the grant can be
	// reattached at all: a grant whose renewal would renew others too (an
	// etcd lease shared by a Client's locks) cannot.
	Ref() (data []byte, ok bool)
}

// Reattacher is implemented by a Driver whose grants live on the server
// alone, so that any connection to it can renew and release them: Redis
// keeps a grant's owner and deadline with the key. A backend whose grant
// lives in one connection (a ZooKeeper session) cannot implement it.
type Reattacher interface {
	// Reattach returns a Grant for ref, sending nothing. Its Renew and
	// Release act on the server as the original grant's would, and only
	// while ref.Owner holds ref.Key with ref.Token: otherwise they return
	// an error satisfying errors.Is(err, ErrNotHeld) and change nothing.
	// Its ValidFrom is the call's time and its Lost is nil. The caller
	// renews it no more than it asks: nothing renews it in the background.
	//
	// It returns an error for a ref that no grant of this driver can have
	// (an unknown Data, a Kind it does not serve).
	Reattach(ref GrantRef) (Grant, error)
}
