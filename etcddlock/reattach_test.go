package etcddlock_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A reference granted by a gateway instance of a dlock whose entries were
// named `<lease, 16 hex>-<n, 8 hex>` (12 bytes, no form byte) is renewed
// and released by this one, so that instances can be upgraded one at a
// time: its Renew finds the entry under the old name, and its Release
// deletes it.
func TestReattach_referenceOfOldNames(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.StartEtcd(t)
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	d, err := etcddlock.OpenDriverForTest(ctx, srv.URL()+"?lease_per_grant=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	// The entry as the older instance made it, on a lease of its own.
	l, err := admin.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1
	name := fmt.Sprintf("%s%016x-%08x", etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, "job"), int64(l.ID), n)
	put, err := admin.Put(ctx, name, "{}", clientv3.WithLease(l.ID))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 12)
	binary.BigEndian.PutUint64(data, uint64(l.ID))
	binary.BigEndian.PutUint32(data[8:], n)
	g, err := d.(driver.Reattacher).Reattach(driver.GrantRef{Key: "job", Owner: "o", TTL: 30 * time.Second,
		Kind: driver.KindLock, Limit: 1, Mode: driver.Exclusive, Token: uint64(put.Header.Revision), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Renew(ctx); err != nil {
		t.Fatalf("Renew of an old-named entry's reference: %v", err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatalf("Release of an old-named entry's reference: %v", err)
	}
	if r, err := admin.Get(ctx, name); err != nil {
		t.Fatal(err)
	} else if len(r.Kvs) != 0 {
		t.Errorf("Release left the entry %s", name)
	}
}
