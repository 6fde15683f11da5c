//go:build !dlock_weak

package lease

import "time"

// countFrom returns the moment a grant's validity is counted from, given
// when the request that made or extended it was sent: that moment itself.
// The build tag dlock_weak replaces it (countfrom_weak.go) with a flawed
// version for the fault-injection suite's negative controls.
func countFrom(sent time.Time) time.Time { return sent }
