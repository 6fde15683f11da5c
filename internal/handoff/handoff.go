// Package handoff lets the gateway take a grant out of a *dlock.Lease and
// renew and release it by reference from any process connected to the
// same server (driver.Referrer, driver.Reattacher), without exporting that
// from package dlock: a lease handed off is no longer the Client's, and
// its Done and Err say nothing of the grant any more. It is for the
// gateway only.
//
// The gateway module imports it across module boundaries, so its API is
// part of what a gateway at version vX.Y.Z expects of the root module at
// the same version: keep it as small as it is.
package handoff

import (
	"context"

	"github.com/dlockdev/dlock/driver"
)

// Detach stops renewing lease, a *dlock.Lease, and forgets it in its
// Client without releasing its grant, when the grant can be reattached
// (its driver is a driver.Reattacher and the grant a driver.Referrer that
// says so); it returns the grant's reference. Otherwise it returns false
// and changes nothing. From then on the server ends the grant when its
// validity runs out unless a reattached grant renews it. Package dlock
// sets it in its init; nothing else writes it.
var Detach func(ctx context.Context, lease any) (driver.GrantRef, bool)

// Reattach returns the grant ref names through the driver of client, a
// *dlock.Client, and false when that driver cannot reattach grants.
// Package dlock sets it in its init; nothing else writes it.
var Reattach func(client any, ref driver.GrantRef) (driver.Grant, bool, error)
