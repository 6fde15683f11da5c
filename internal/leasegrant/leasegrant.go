// Package leasegrant hands the backend packages the driver.Grant behind a
// *dlock.Lease, for their fencing checks (etcddlock.IsOwner,
// zkdlock.CheckHeld), without exporting it from package dlock: an
// application that renewed or released the grant itself would break the
// lease's Done, Err and Unlock. It is for use by the backends only.
//
// The backend modules import it across module boundaries, so its API is
// part of what a backend at version vX.Y.Z expects of the root module at
// the same version: keep it as small as it is.
package leasegrant

import "github.com/dlockdev/dlock/driver"

// Of returns the grant behind lease, a *dlock.Lease, and nil for anything
// else (a nil *dlock.Lease included). It takes any because this package
// cannot import dlock, which imports it. Package dlock sets it in its init,
// which Go runs before the code of any package that imports dlock; nothing
// else writes it.
var Of func(lease any) driver.Grant
