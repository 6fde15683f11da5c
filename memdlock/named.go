package memdlock

import "github.com/dlockdev/dlock/driver"

var _ driver.Named = (*conn)(nil)

// Backend names the service for dlock's Hooks.
func (c *conn) Backend() string { return "mem" }
