package etcddlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
	ibackoff "github.com/dlockdev/dlock/internal/backoff"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrUnsafeServer is returned by New and Open (wrapped, naming the etcd
// members and their versions) when a member of the cluster runs an etcd
// version that can revoke a lease while its holder is renewing it, which
// can grant a held lock to a second owner. See Options.AllowUnsafeVersion.
var ErrUnsafeServer = errors.New("etcddlock: unsafe etcd server version")

// code returns the gRPC code of an error from the etcd client, which comes
// either as a gRPC status or as an rpctypes.EtcdError.
func code(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}

// transient reports whether a request that failed with err may succeed if
// sent again: etcd is overloaded ("too many requests": its apply lags its
// commit), has no leader or is electing one ("no leader", "leader changed",
// "not leader"), a request timed out inside the cluster ("request timed
// out", also while waiting for the applied index), or the connection
// dropped. The outcome of a write that failed this way is unknown, except
// when rejected says otherwise.
func transient(err error) bool {
	switch code(err) {
	case codes.Unavailable, codes.Aborted:
		return true
	case codes.ResourceExhausted:
		// "too many requests", but not "database space exceeded", which
		// needs an operator.
		return rejected(err)
	case codes.FailedPrecondition:
		// "not leader": the member lost its leadership under the request.
		return rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCNotLeader)
	case codes.DeadlineExceeded:
		// A timeout inside the server; callers check their own context.
		return true
	}
	// A keep-alive reaching a leader that cannot confirm its leadership:
	// etcd sends lease.ErrNotPrimary as an unknown error.
	return rpctypes.ErrorDesc(err) == errNotPrimaryDesc
}

// errNotPrimaryDesc is the text of etcd's lease.ErrNotPrimary.
const errNotPrimaryDesc = "not a primary lessor"

// rejected reports an error with which etcd refused a write before proposing
// it to Raft: "too many requests", sent when its applied index lags its
// committed index by too much. Such a write certainly was not applied, and
// never will be.
func rejected(err error) bool {
	return code(err) == codes.ResourceExhausted &&
		rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCRequestTooManyRequests)
}

// isLeaseNotFound reports an error saying that a lease expired or was revoked.
func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) ||
		rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCLeaseNotFound)
}

// isAuthErr reports an error about credentials or permissions.
func isAuthErr(err error) bool {
	switch code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	desc := rpctypes.ErrorDesc(err)
	for _, e := range []error{rpctypes.ErrGRPCAuthFailed, rpctypes.ErrGRPCUserEmpty, rpctypes.ErrGRPCAuthOldRevision, rpctypes.ErrGRPCUserNotFound} {
		if desc == rpctypes.ErrorDesc(e) {
			return true
		}
	}
	return false
}

// wrapErr gives an etcd error the dlock sentinel it deserves and names the
// server; where is the driver's step ("take the lock", "read the queue"),
// never the call dlock names already. The etcd error is wrapped.
func (d *etcdDriver) wrapErr(where string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("etcd at %s: %s: %w", d.addr, where, err)
	case isAuthErr(err):
		return fmt.Errorf("%w: etcd at %s: %s: %w (check the user name and password, and that the user's role may read and write the prefix %q)",
			driver.ErrAuth, d.addr, where, err, d.prefix)
	case transient(err):
		return fmt.Errorf("%w: etcd at %s: %s: %w", driver.ErrUnavailable, d.addr, where, err)
	}
	return fmt.Errorf("etcd at %s: %s: %w", d.addr, where, err)
}

// retryPauses spaces out retries after transient errors: 5 ms doubling to
// 1 s, with jitter so that clients that failed together do not retry
// together.
var retryPauses = ibackoff.Policy{Initial: 5 * time.Millisecond, Max: time.Second, Jitter: ibackoff.Equal}

// backoff counts one loop's retries; its zero value starts at retryPauses'
// first delay.
type backoff struct{ b *ibackoff.Backoff }

// wait waits before the next retry, returning early with ctx's error.
func (b *backoff) wait(ctx context.Context) error {
	if b.b == nil {
		b.b = ibackoff.New(retryPauses)
	}
	return b.b.Wait(ctx)
}

// retry runs op until it succeeds, fails with an error that is not
// transient, or ctx ends. When ctx ends after transient failures it returns
// ctx's error, with the last failure in the message.
func retry(ctx context.Context, op func(ctx context.Context) error) error {
	var b backoff
	for {
		err := op(ctx)
		if err == nil || !transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last etcd error: %w)", ctx.Err(), err)
		}
		if werr := b.wait(ctx); werr != nil {
			return fmt.Errorf("%w (last etcd error: %w)", werr, err)
		}
	}
}
