package etcddlock

import "github.com/dlockdev/dlock/driver"

var _ driver.Named = (*etcdDriver)(nil)

// Backend names the service for dlock's Hooks.
func (d *etcdDriver) Backend() string { return "etcd" }
