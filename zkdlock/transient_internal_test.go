package zkdlock

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/go-zookeeper/zk"
)

// TestTransient_classifies: connection problems are retried, a failed
// write of the request's own among them (go-zookeeper returns its
// net.Error as it is); the end of a context and the server's refusals are
// not, though context.DeadlineExceeded is a net.Error too.
func TestTransient_classifies(t *testing.T) {
	write := func(err error) error { return &net.OpError{Op: "write", Net: "tcp", Err: err} }
	tests := []struct {
		err  error
		want bool
	}{
		{zk.ErrConnectionClosed, true},
		{zk.ErrNoServer, true},
		{zk.ErrSessionExpired, true},
		{fmt.Errorf("delete: %w", errNoAnswer), true},
		{write(syscall.EPIPE), true},
		{write(syscall.ECONNRESET), true},
		{write(os.ErrDeadlineExceeded), true},
		{write(net.ErrClosed), true},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("call: %w", context.Canceled), false},
		{zk.ErrNoNode, false},
		{zk.ErrBadVersion, false},
		{zk.ErrNoAuth, false},
		{zk.ErrClosing, false},
	}
	for _, tt := range tests {
		if got := transient(tt.err); got != tt.want {
			t.Errorf("transient(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
