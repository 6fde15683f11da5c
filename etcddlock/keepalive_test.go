package etcddlock_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// renewals opens a Client of url whose held leases report each renewal on
// the returned channel.
func renewals(t *testing.T, ctx context.Context, url string) (*dlock.Client, <-chan dlock.RenewedInfo) {
	t.Helper()
	ch := make(chan dlock.RenewedInfo, 64)
	c, err := dlock.Open(ctx, url, dlock.WithHooks(dlock.Hooks{Renewed: func(_ context.Context, info dlock.RenewedInfo) {
		select {
		case ch <- info:
		default: // the test reads the latest only
		}
	}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, ch
}

// waitRenewedPast waits until l was renewed to a deadline after d0, and
// fails the test if l ends first or ctx ends.
func waitRenewedPast(t *testing.T, ctx context.Context, l *dlock.Lease, renewed <-chan dlock.RenewedInfo, d0 time.Time) {
	t.Helper()
	for {
		select {
		case info := <-renewed:
			if info.Err != nil {
				t.Logf("renewal failed (retried): %v", info.Err)
				continue
			}
			if l.Deadline().After(d0) {
				return
			}
		case <-l.Done():
			t.Fatalf("lease lost: %v", l.Err())
		case <-ctx.Done():
			t.Fatal("lease neither renewed nor lost (watchdog)")
		}
	}
}

// keepAliveBytes is the protobuf encoding of the keep-alive request of
// lease id: it appears in the gRPC DATA frame that carries the request.
func keepAliveBytes(t *testing.T, id clientv3.LeaseID) []byte {
	b, err := proto.Marshal(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A holder connected to a follower renews through it; the follower
// forwards the keep-alive to the leader. The leader freezes with that
// keep-alive in flight: the follower waits for it (longer than the lease),
// while the others elect a new leader within one or two seconds. The
// holder sends its keep-alive again, well before its deadline, and the
// lease survives.
func TestLease_leaderFrozenDuringKeepAlive_survives(t *testing.T) {
	ctx := testCtx(t)
	cl := testserver.StartEtcdCluster(t, 3)
	lead, err := cl.WaitLeader(ctx, -1)
	if err != nil {
		t.Fatal(err)
	}
	follower := (lead + 1) % 3
	p := faultproxy.Start(t, cl.Addrs()[follower], nil)
	holder, renewed := renewals(t, ctx, "etcd://"+p.Addr())
	key := "leader-frozen/" + t.Name()
	l, err := holder.Lock(ctx, key, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, cl.Addrs()[follower])
	_, _, id := entry(t, ctx, admin, key)

	// Hold the holder's traffic until its first keep-alive is on its way,
	// then freeze the leader and let the keep-alive reach the follower.
	ka := keepAliveBytes(t, id)
	obs := p.Observe(func(f *faultproxy.Frame) bool { return f.Up && bytes.Contains(f.Data, ka) })
	defer obs.Stop()
	p.Blackhole()
	select {
	case <-obs.C:
	case <-ctx.Done():
		t.Fatal("no keep-alive sent (watchdog)")
	}
	cl.Freeze(lead)
	t.Cleanup(func() { cl.Thaw(lead) })
	d0 := l.Deadline()
	p.Restore()

	newLead, err := cl.WaitLeader(ctx, lead)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("member %d froze; member %d leads now", lead, newLead)
	waitRenewedPast(t, ctx, l, renewed, d0)
}

// A renewal whose connection goes silent (every packet held, nothing
// closed: a dropped NAT entry, a peer gone without a reset) while new
// connections work is sent again on a fresh connection before the lease's
// deadline, and the lease survives. gRPC's pings would notice the silence
// only after 15 s, past the lease.
func TestLease_connectionSilent_renewedOnFreshConnection(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedEtcd(t)
	p := faultproxy.Start(t, srv.Addr(), nil)
	holder, renewed := renewals(t, ctx, "etcd://"+p.Addr())
	l, err := holder.Lock(ctx, "silent/"+t.Name(), dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Silence the connections made so far; later ones flow.
	existing := uint64(p.Accepted())
	p.Tag(func(f *faultproxy.Frame) bool { return f.Conn <= existing })
	p.HoldTagged(true)
	t.Cleanup(func() { p.HoldTagged(false) })
	d0 := l.Deadline()
	waitRenewedPast(t, ctx, l, renewed, d0)
	if p.Accepted() <= int64(existing) {
		t.Errorf("renewed without a new connection (%d accepted, as before the silence)", p.Accepted())
	}
}

// A waiter whose connection goes silent while new connections work renews
// its lease on a fresh connection and keeps its place.
func TestLock_waiterConnectionSilent_keepsPlace(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedEtcd(t)
	key := "silent-waiter/" + t.Name()
	holder := openClient(t, ctx, srv.URL())
	lh, err := holder.Lock(ctx, key, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Unlock(ctx)
	p := faultproxy.Start(t, srv.Addr(), nil)
	waiter := openClient(t, ctx, "etcd://"+p.Addr())
	wctx, cancel := context.WithCancel(ctx)
	got := goLockUnlock(wctx, waiter, key, dlock.WithTTL(3*time.Second))
	defer func() { cancel(); <-got }()
	waitWaiters(t, ctx, holder, key, 1)
	admin := adminClient(t, srv.Addr())
	newest := append([]clientv3.OpOption{clientv3.WithPrefix()}, clientv3.WithLastCreate()...)
	resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), newest...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("the waiter's entry: %v (%d keys)", err, len(resp.Kvs))
	}
	wkey, id := string(resp.Kvs[0].Key), clientv3.LeaseID(resp.Kvs[0].Lease)

	existing := uint64(p.Accepted())
	ka := keepAliveBytes(t, id)
	answer, err := proto.Marshal(&pb.LeaseKeepAliveResponse{ID: int64(id)})
	if err != nil {
		t.Fatal(err)
	}
	// The answer to a keep-alive on a new connection.
	var fresh atomic.Uint64
	obs := p.Observe(func(f *faultproxy.Frame) bool {
		if f.Conn <= existing {
			return false
		}
		if f.Up && bytes.Contains(f.Data, ka) {
			fresh.CompareAndSwap(0, f.Conn)
		}
		return !f.Up && f.Conn == fresh.Load() && bytes.Contains(f.Data, answer)
	})
	defer obs.Stop()
	p.Tag(func(f *faultproxy.Frame) bool { return f.Conn <= existing })
	p.HoldTagged(true)
	defer p.HoldTagged(false) // before the waiter leaves, which it tells etcd
	select {
	case <-obs.C:
	case err := <-got:
		t.Fatalf("the waiter's Lock returned: %v", err)
	case <-ctx.Done():
		t.Fatal("no keep-alive answered on a new connection (watchdog)")
	}
	ttl, err := admin.TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL <= 0 {
		t.Fatalf("the waiter's lease expired (TTL %d)", ttl.TTL)
	}
	after, err := admin.Get(ctx, wkey)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Kvs) != 1 || clientv3.LeaseID(after.Kvs[0].Lease) != id {
		t.Fatalf("the waiter's entry %q is gone or on another lease: %v", wkey, after.Kvs)
	}
}
