package redisdlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/dlockdev/dlock/driver"
)

var errNotHeld = driver.ErrNotHeld

// ErrUnsafeServer is returned by New and Open (wrapped, with the server's
// address and the setting) when the server is configured in a way that can
// break the lock's guarantees: a maxmemory-policy that may evict keys. See
// Options.AllowEviction.
var ErrUnsafeServer = errors.New("redisdlock: unsafe server configuration")

// wrapErr classifies a go-redis error for dlock's callers: where names the
// server, and the driver's own step if dlock does not name it already
// ("renew", "subscribe"; not "release", which is Unlock). The go-redis error
// is wrapped, for errors.Is and errors.As.
func wrapErr(where string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", where, err)
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"),
		strings.Contains(msg, "invalid username-password"), strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("%w: %s: %w (check the user name and password)", driver.ErrAuth, where, err)
	}
	var certErr *tls.CertificateVerificationError
	var opErr *net.OpError
	// crypto/tls reports the server's refusal of the handshake (a missing
	// client certificate, say) as a "remote error".
	if errors.As(err, &certErr) || (errors.As(err, &opErr) && opErr.Op == "remote error") {
		return fmt.Errorf("%w: %s: %w (check the URL's cacert, cert, key and server_name)", driver.ErrUnavailable, where, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.As(err, &opErr) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(msg, "connection refused") || strings.Contains(msg, "EOF") {
		return fmt.Errorf("%w: %s: %w (is redis-server running and reachable there?)", driver.ErrUnavailable, where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// ErrCrossSlot is returned by a Fence's writes, wrapped with the key, its
// hash slot and the hash tag that would fix it, when a key of the write is
// not in the hash slot of the fence's record on a Redis Cluster (or has
// another hash tag than the record on a Ring): the record and the data must
// be on one node for one script to check and write them together. Nothing
// is written.
var ErrCrossSlot = errors.New("redisdlock: key of a fenced write outside the fence's hash slot")

// ErrReplyLost is returned by a Fence's HSet, Del and Do, wrapped with the
// fence and the write, when the write is applied, exactly once, but its
// reply is gone: the connection failed after the server ran it, go-redis
// sent it again, and the fence recognized the resend by its write id and
// ran nothing. The data holds the write; what the command answered (HSet's
// and Del's count, Do's reply) is not known. Set returns nil instead, its
// reply carrying nothing. docs/fencing.md, section Redis, "A lost reply".
var ErrReplyLost = errors.New("redisdlock: fenced write applied once, its reply lost")
