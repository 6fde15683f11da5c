package lease

import (
	"context"
	"time"
)

// TryTimeout returns how long one try of a renewal's request, sent now, may
// wait for its answer before the driver gives up on its connection and
// tries again on another: half of what is left until end, or until ctx's
// deadline when that is earlier (a zero end: ctx's deadline alone). A
// connection can go silent while new ones work (a NAT or a load balancer
// that lost its state, a half-open TCP connection, a request forwarded to a
// frozen leader): waiting on it until the lease's deadline would lose a
// lease that another connection could renew. Half, not less: a reply that
// is only slow (a loaded server, a long path) must still make it, and the
// retry costs a reconnect on top of its round trip.
//
// ok is false when the try should have no deadline of its own and get all
// that is left: there is no end (nor a deadline on ctx), or half of it is
// less than floor, the least time in which a try can be answered (then a
// second try would not be either). An end that has passed leaves no half.
func TryTimeout(ctx context.Context, end time.Time, floor time.Duration) (timeout time.Duration, ok bool) {
	if dl, has := ctx.Deadline(); has && (end.IsZero() || dl.Before(end)) {
		end = dl
	}
	if end.IsZero() {
		return 0, false
	}
	return halfLeft(time.Until(end), floor)
}

// halfLeft is TryTimeout's rule for left, the time until the end.
func halfLeft(left, floor time.Duration) (time.Duration, bool) {
	half := left / 2
	if half < floor || half < 0 {
		return 0, false
	}
	return half, true
}
