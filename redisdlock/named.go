package redisdlock

import "github.com/dlockdev/dlock/driver"

var _ driver.Named = (*redisDriver)(nil)

// Backend names the service for dlock's Hooks.
func (d *redisDriver) Backend() string { return "redis" }
