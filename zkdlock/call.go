package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	ibackoff "github.com/dlockdev/dlock/internal/backoff"
	"github.com/go-zookeeper/zk"
)

// errNoAnswer is the error of a request that got no answer within the
// session timeout: by then go-zookeeper has given up on the connection (it
// does after two thirds of it), so waiting longer only waits for a reconnect.
var errNoAnswer = errors.New("zk: no answer within the session timeout")

// errSilent is the error of a renewal's request that got no answer within
// half of what was left of the lease: its connection was dropped, and a
// retry goes out on a new one (see zkDriver.dropIfSilent).
var errSilent = errors.New("zk: connection silent")

// call runs one go-zookeeper request, which cannot be cancelled, on
// another goroutine (a worker: see worker.go), and returns its result; or
// ctx.Err() when ctx ends first; or errNoAnswer after timeout (if timeout
// > 0). A request given up on this way still completes
// in the background: it may yet act on the server, so a caller that gives up
// on a Create must find out later what it did (see attempt.cleanup). When
// inflight is not nil, it counts the request until it completes.
//
// go-zookeeper completes every request eventually: with the server's answer,
// or with an error when the connection breaks, the session expires or the
// Conn is closed.
func call[T any](ctx context.Context, inflight *sync.WaitGroup, timeout time.Duration, f func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	return awaitCall(ctx, startCall(inflight, f), timeout)
}

// startCall sends f, a go-zookeeper request, as call does, without waiting
// for it; awaitCall waits for it as call does. It lets a request go out
// beside another that the caller sends itself, for one round trip.
func startCall[T any](inflight *sync.WaitGroup, f func() (T, error)) *pending[T] {
	p := newPending(inflight, f, nil)
	dispatch(p)
	return p
}

// call0 is call for requests that return only an error.
func call0(ctx context.Context, inflight *sync.WaitGroup, timeout time.Duration, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := newPending[struct{}](inflight, nil, f)
	dispatch(p)
	_, err := awaitCall(ctx, p, timeout)
	return err
}

// transient reports whether err is a connection problem that a retry on the
// same Conn may overcome: the connection broke (a request's reply may have
// been lost), no server answered, or the session expired and go-zookeeper is
// getting a new one. A request whose own write to the connection failed
// (broken pipe, reset, write timeout) gets that net.Error from go-zookeeper
// as it is, which closes the connection and reconnects: a broken connection
// too, and the request may have reached the server in part or whole. (The
// end of a context is a net.Error as well, and not one of these.)
func transient(err error) bool {
	var netErr net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved) ||
		errors.Is(err, errNoAnswer) || errors.Is(err, errSilent) ||
		(errors.As(err, &netErr) && !isCtxErr(err))
}

// isCtxErr reports whether err is the end of a context.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// wrapErr classifies a go-zookeeper error for dlock's callers: op says what
// was being done, and the message names the servers.
func (d *zkDriver) wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("zookeeper at %s: %s", d.addr, op)
	switch {
	case isCtxErr(err):
		return fmt.Errorf("%s: %w", where, err)
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed), errors.Is(err, zk.ErrInvalidACL):
		return fmt.Errorf("%w: %s: %w (check the user and password in the URL, and the ACL of %s)", driver.ErrAuth, where, err, d.root)
	case transient(err), errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("%w: %s: %w", driver.ErrUnavailable, where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// retryPauses spaces out retries of transient errors: short, because
// go-zookeeper's own requests block while it reconnects, so the loop does
// not spin; jittered, because the clients of a server that went away all
// fail at once.
var retryPauses = ibackoff.Policy{Initial: 5 * time.Millisecond, Max: 160 * time.Millisecond, Jitter: ibackoff.Equal}

// backoff waits before retry number attempt (0 for the first), at most
// limit, which keeps it well below a session timeout or a lease's validity.
func backoff(ctx context.Context, attempt int, limit time.Duration) error {
	p := retryPauses
	p.Max = min(p.Max, limit)
	return ibackoff.Sleep(ctx, p.Delay(attempt))
}
