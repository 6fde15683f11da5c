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
	// Every Lock asks; the hint is read only when its TTL is refused, so
	// it is made once per timeout rather than per call.
	if h := d.ttlHint.Load(); h != nil && h.t == t {
		return t, h.msg
	}
	msg := fmt.Sprintf("ZooKeeper leases last the session timeout, %v here (Options.SessionTimeout); to change it, change the timeout given to zk.Connect and Options.SessionTimeout, and leave the TTL out", t)
	if d.closeConn != nil { // opened from a zk:// URL
		msg = fmt.Sprintf("zk:// leases last the ZooKeeper session timeout, %v here; to change it, set ?session_timeout=DURATION in the URL and leave the TTL out", t)
	}
	d.ttlHint.Store(&ttlHint{t: t, msg: msg})
	return t, msg
}

// ttlHint is FixedTTL's hint for timeout t.
type ttlHint struct {
	t   time.Duration
	msg string
}

var _ driver.FixedTTL = (*zkDriver)(nil)
