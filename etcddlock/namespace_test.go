package etcddlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
)

// New takes the connection of the etcd client it is given, and nothing of
// the namespace wrappers a program may have put on cli.KV, cli.Watcher and
// cli.Lease: Options.Prefix places dlock's keys. Writing through cli.KV
// (namespaced) but watching and leasing through new ones (not namespaced)
// would make a waiter watch keys that are never written and wait for its
// fallback queue check; the lock's entry would then be under
// "nstest/dlock/" instead of "dlock/".
func TestNew_ignoresNamespaceOfClient(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := adminClient(t, srv.Addr())
	raw := adminClient(t, srv.Addr())
	cli.KV = namespace.NewKV(cli.KV, "nstest/")
	cli.Watcher = namespace.NewWatcher(cli.Watcher, "nstest/")
	cli.Lease = namespace.NewLease(cli.Lease, "nstest/")

	c, err := etcddlock.New(ctx, cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Lock(ctx, "namespace-test")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)

	for prefix, want := range map[string]bool{etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, "namespace-test"): true, "nstest/": false} {
		resp, err := raw.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Count > 0; got != want {
			t.Errorf("keys under %q: %d, want any: %v", prefix, resp.Count, want)
		}
	}
}
