package zkdlock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testproc/outage"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

func init() {
	// Another key after the restart: if the reconnect saved the session,
	// the lost lease's node goes only some time after it (see
	// TestLease_lostLocallySessionSaved_nodeRemoved), and a TryLock of its
	// key could find it still there.
	childRoles["zk-outage-holder"] = outage.Holder{Relock: "after-outage"}.Role()
}

// A Client whose ZooKeeper goes away while it holds a lease, and comes
// back, writes nothing to stderr, even in a program whose slog default
// logger writes debug messages there; with a logger, go-zookeeper's
// messages about the failed reconnects go to it.
func TestClient_serverOutage_nothingOnStderr(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	for _, logged := range []bool{false, true} {
		t.Run(fmt.Sprintf("logger=%v", logged), func(t *testing.T) {
			root := fmt.Sprintf("/outage-%d", time.Now().UnixNano())
			url := "zk://" + srv.Addr() + root + "?session_timeout=1s&tick_time=100ms"
			msgs := outage.Run(t, "zk-outage-holder", url, logged, srv.Kill, func() { srv.Restart(t) })
			if !logged {
				return
			}
			found := false
			for _, m := range msgs {
				found = found || strings.HasPrefix(m, "zkdlock: failed to connect to "+srv.Addr())
			}
			if !found {
				t.Errorf("the Client's logger got no go-zookeeper message about a failed connection; it got %q", msgs)
			}
		})
	}
}
