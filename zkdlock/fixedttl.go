package zkdlock

import (
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// FixedTTL implements driver.FixedTTL: every lease lasts the session timeout
// (see the package documentation, Lease length), so dlock refuses a WithTTL
// of another length instead of ignoring it.
func (d *zkDriver) FixedTTL() (time.Duration, string) {
	t := d.timeout()
	if d.closeConn != nil { // opened from a zk:// URL
		return t, fmt.Sprintf("zk:// leases last the ZooKeeper session timeout, %v here; to change it, set ?session_timeout=DURATION in the URL and leave the TTL out", t)
	}
	return t, fmt.Sprintf("ZooKeeper leases last the session timeout, %v here (Options.SessionTimeout); to change it, change the timeout given to zk.Connect and Options.SessionTimeout, and leave the TTL out", t)
}

var _ driver.FixedTTL = (*zkDriver)(nil)
