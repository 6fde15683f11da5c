package redisdlock

import (
	"strconv"
	"time"

	"github.com/dlockdev/dlock/internal/lease"
)

// clockReading is one reading of the server's clock (TIME, in µs), taken by
// a script that ran at some moment between sent and received, two readings
// of this process's monotonic clock. ahead uses the older reading's sent
// and the newer one's received only, so a grant's reading, never the newer
// one, has no received of its own.
type clockReading struct {
	sent, received time.Time
	serverUs       int64
}

// ahead returns how far the server's clock ran ahead of this process's
// monotonic clock from r to a later reading n, when that is more than the
// lease engine allows for clocks running at different rates; otherwise 0.
// The zero clockReading (none taken) never reports anything.
//
// Between the two scripts, at most n.received - r.sent passed here. A
// server clock that advanced more than that, beyond the engine's drift
// allowance, stepped ahead (or this machine was suspended: the monotonic
// clock stops then). The result is a lower bound of the step.
func (r clockReading) ahead(n clockReading) time.Duration {
	if r.sent.IsZero() {
		return 0
	}
	elapsed := n.received.Sub(r.sent)
	ran := time.Duration(n.serverUs-r.serverUs) * time.Microsecond
	allowed := time.Duration(float64(elapsed)*lease.DriftFactor) + lease.DriftMargin
	if over := ran - elapsed; over > allowed {
		return over
	}
	return 0
}

func parseInt(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
