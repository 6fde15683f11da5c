package etcddlock

import (
	"errors"
	"fmt"

	"github.com/dlockdev/dlock/driver"
)

// checkLockDelay refuses a request with a lock-delay, which this driver
// does not store yet: a grant would otherwise be handed on at once after
// an expiry or a revoke, the very thing the caller asked to prevent.
func checkLockDelay(req *driver.AcquireRequest) error {
	if req.LockDelay != 0 {
		return fmt.Errorf("%w: etcddlock does not keep a lock-delay", errors.ErrUnsupported)
	}
	return nil
}
