package testserver

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/faultproxy"
)

// ReplicatedRedis is a Redis master with one replica whose replication link
// goes through a proxy, so that a test can hold the replication stream
// (Proxy.HoldTagged: the tagged frames are PSYNC and SYNC, the
// replication's): the master then runs writes that the replica does not
// have, as after a network partition or with a slow replica.
type ReplicatedRedis struct {
	Master, Replica *Redis
	Proxy           *faultproxy.Proxy // the replica's link to the master
}

// StartReplicatedRedis starts a ReplicatedRedis, its proxy reading the time
// on clock (faultproxy.Options.Clock; nil: the proxy's own), and waits until
// the replica's link is up. All of it stops when the test ends.
func StartReplicatedRedis(t testing.TB, clock func() int64) *ReplicatedRedis {
	t.Helper()
	r := &ReplicatedRedis{Master: StartRedis(t)}
	r.Proxy = faultproxy.Start(t, r.Master.Addr(), &faultproxy.Options{Protocol: faultproxy.RESP, Clock: clock})
	r.Proxy.Tag(func(f *faultproxy.Frame) bool { c := f.Command(); return c == "PSYNC" || c == "SYNC" })
	_, pport, _ := net.SplitHostPort(r.Proxy.Addr())
	r.Replica = StartRedis(t, "--replicaof", "127.0.0.1", pport)
	Await(t, 30*time.Second, "the replica's link up", func(ctx context.Context) error {
		info, err := RedisCommand(ctx, r.Replica.Addr(), "INFO", "replication")
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica link not up: %v", err)
		}
		return nil
	})
	return r
}
