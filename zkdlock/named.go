package zkdlock

import "github.com/dlockdev/dlock/driver"

var _ driver.Named = (*zkDriver)(nil)

// Backend names the service for dlock's Hooks.
func (d *zkDriver) Backend() string { return "zookeeper" }
