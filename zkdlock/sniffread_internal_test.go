package zkdlock

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/go-zookeeper/zk"
)

// countingConn counts the reads of a connection and the read deadlines set
// on it.
type countingConn struct {
	net.Conn
	reads, deadlines *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

func (c countingConn) SetReadDeadline(t time.Time) error {
	c.deadlines.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// go-zookeeper's reader asks for each frame's length and then for the
// frame, setting a read deadline before and clearing it after: through a
// sniffConn a reply costs the connection one read and one deadline, not two
// of each.
func TestSniffConn_oneReadPerReply(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	var reads, deadlines atomic.Int64
	info := &sessionInfo{}
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &sniffConn{Conn: countingConn{c, &reads, &deadlines}, info: info, dialed: time.Now()}, nil
	}
	conn, events, err := zk.Connect([]string{srv.Addr()}, time.Minute, zk.WithDialer(dial), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.After(time.Minute)
	for conn.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-deadline:
			t.Fatal("no session (watchdog)")
		}
	}
	const n = 100
	r0, d0 := reads.Load(), deadlines.Load()
	for range n {
		// One at a time: each reply arrives alone.
		if _, _, err := conn.Exists("/"); err != nil {
			t.Fatal(err)
		}
	}
	// A ping's reply may come in between.
	r, d := reads.Load()-r0, deadlines.Load()-d0
	t.Logf("%d replies: %d reads, %d read deadlines", n, r, d)
	if r > n+5 || d > n+5 {
		t.Errorf("%d replies took %d reads and %d read deadlines of the connection, want at most one of each per reply", n, r, d)
	}
}
