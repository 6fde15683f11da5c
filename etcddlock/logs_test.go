package etcddlock_test

import (
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testproc/outage"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

func init() {
	// Another key after the restart: the lost lease's entry lasts until
	// etcd expires its lease. Each try is bounded: etcd's client waits for
	// a connection as long as the context lets it.
	fenceRoles["etcd-outage-holder"] = outage.Holder{TTL: 2 * time.Second, Relock: "after-outage", Try: 2 * time.Second}.Role()
}

// A Client whose etcd goes away while it holds a lease, and comes back,
// writes nothing to stderr: the client Open makes logs to zap.NewNop, and
// gRPC's default logger, which prints errors there, has none to print.
func TestClient_serverOutage_nothingOnStderr(t *testing.T) {
	srv := testserver.StartEtcd(t)
	outage.Run(t, "etcd-outage-holder", srv.URL(), false, srv.Stop, func() {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	})
}
