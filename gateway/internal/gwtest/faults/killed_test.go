package faults

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/gateway"
	"github.com/dlockdev/dlock/internal/testing/testproc"
)

// gatewayProcess serves a gateway over the backend at $BACKEND (with the
// lease key $LEASE_KEY, in hex, if set) on a loopback port and says its
// URL and pid, then serves until it is killed or its stdin closes.
func gatewayProcess(ctx context.Context, p *testproc.Peer) error {
	client, err := dlock.Open(ctx, p.Env("BACKEND"))
	if err != nil {
		return err
	}
	defer client.Close()
	var opts []gateway.Option
	if k := p.Env("LEASE_KEY"); k != "" {
		key, err := hex.DecodeString(k)
		if err != nil {
			return err
		}
		opts = append(opts, gateway.LeaseKey(key))
	}
	gw, err := gateway.New(client, opts...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	p.Say("url http://%s", ln.Addr())
	p.Say("pid %d", os.Getpid())
	err = p.Await("stop")
	_ = gw.Close(context.Background())
	_ = srv.Close()
	if err != nil && !strings.Contains(err.Error(), "stdin closed") {
		return err
	}
	return nil
}

// A gateway killed with SIGKILL loses no safety: the lease it held for a
// client is not released by the kill (no process is left to release it),
// it expires on the backend within about its TTL because nobody renews it
// any more, and the next grant carries a higher token. On each backend.
func TestGatewayKilled_leaseExpiresTokensGoUp(t *testing.T) {
	const ttl = 2 * time.Second
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			if b.name == "zk" {
				// The session timeout is every lease's TTL there; the
				// killed process's session expires with it.
				url += "?session_timeout=" + ttl.String()
			}
			ctx := context.Background()
			direct, err := dlock.Open(ctx, url, dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			key := key(t, "killed")

			child := testproc.Start(t, "gateway", "BACKEND="+url)
			base := child.Expect(t, "url")
			pid, err := strconv.Atoi(child.Expect(t, "pid"))
			if err != nil {
				t.Fatal(err)
			}
			body := map[string]any{"key": key, "ttl_ms": ttl.Milliseconds()}
			r, err := call(ctx, http.MethodPost, base, "/v1/acquire", body)
			if err != nil || r.Status != http.StatusOK {
				t.Fatalf("acquire through the gateway: %v %d %s", err, r.Status, r.Raw)
			}
			first := uint64(r.Num("token"))
			if in, err := direct.Inspect(ctx, key); err != nil || len(in.Holders) != 1 || in.Holders[0].Token != first {
				t.Fatalf("the gateway granted token %d; the backend shows %+v (%v)", first, in, err)
			}

			killed := time.Now()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			// The kill released nothing: the key is held by the dead
			// gateway's lease until that lease expires.
			if in, err := direct.Inspect(ctx, key); err != nil || len(in.Holders) != 1 || in.Holders[0].Token != first {
				t.Fatalf("right after the kill the backend shows %+v (%v), want the killed gateway's token %d", in, err, first)
			}
			if _, err := call(ctx, http.MethodPost, base, "/v1/acquire", body); err == nil {
				t.Fatal("the killed gateway still answers")
			}

			// Expiry is bounded by the TTL counted from the last renewal,
			// which was before the kill; twice the TTL leaves room for
			// the backend's expiry check (ZooKeeper's session tick) on a
			// loaded machine, and is still far below "held forever".
			lctx, cancel := context.WithDeadline(ctx, killed.Add(2*ttl))
			lease, err := direct.Lock(lctx, key)
			cancel()
			if err != nil {
				t.Fatalf("the killed gateway's lease did not expire within 2×TTL (%v): %v", 2*ttl, err)
			}
			t.Logf("%s: next grant %v after the kill (TTL %v)", b.name, time.Since(killed).Round(time.Millisecond), ttl)
			defer func() { _ = lease.Unlock(context.Background()) }()
			if lease.Token() <= first {
				t.Fatalf("token %d granted after the killed gateway's %d: want it higher", lease.Token(), first)
			}
		})
	}
}

// A gateway killed with SIGKILL right after a grant takes the lease with
// it only where the lease lives in it: where any instance serves a lease
// (Redis; etcd with a lease per grant), the client goes on renewing it
// through another instance, past its TTL, then releases it there, and the
// next grant carries a higher token.
func TestGatewayKilled_leaseRenewedThroughAnother(t *testing.T) {
	const ttl = 2 * time.Second
	for _, b := range backends {
		if !b.portable {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			ctx := context.Background()
			direct, err := dlock.Open(ctx, url, dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			key := key(t, "killed")
			k := newLeaseKey()
			other := serveGateway(t, url, gateway.LeaseKey(k))

			child := testproc.Start(t, "gateway", "BACKEND="+url, "LEASE_KEY="+hex.EncodeToString(k))
			base := child.Expect(t, "url")
			pid, err := strconv.Atoi(child.Expect(t, "pid"))
			if err != nil {
				t.Fatal(err)
			}
			r, err := call(ctx, http.MethodPost, base, "/v1/acquire", map[string]any{"key": key, "ttl_ms": ttl.Milliseconds()})
			if err != nil || r.Status != http.StatusOK {
				t.Fatalf("acquire through the gateway: %v %d %s", err, r.Status, r.Raw)
			}
			first, id := uint64(r.Num("token")), r.Str("lease_id")
			granted := time.Now()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			// The client renews a few times a TTL, for two TTLs, through
			// the instance left.
			for time.Since(granted) < 2*ttl {
				rn, err := call(ctx, http.MethodPost, other, "/v1/leases/"+id+"/renew", nil)
				if err != nil || rn.Status != http.StatusOK {
					t.Fatalf("renew through the other instance %v after the grant: %v %d %s", time.Since(granted), err, rn.Status, rn.Raw)
				}
				time.Sleep(ttl / 5) // the client's renewal interval, not a wait for an event
			}
			if _, err := direct.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
				t.Fatalf("TryLock beside the lease renewed through the other instance: %v, want ErrLocked", err)
			}
			rel, err := call(ctx, http.MethodDelete, other, "/v1/leases/"+id, nil)
			if err != nil || rel.Status != http.StatusOK {
				t.Fatalf("release through the other instance: %v %d %s", err, rel.Status, rel.Raw)
			}
			// Released, not left to expire: free at once.
			lease, err := direct.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("TryLock after the release through the other instance: %v", err)
			}
			defer func() { _ = lease.Unlock(context.Background()) }()
			if lease.Token() <= first {
				t.Fatalf("token %d after the released %d: want it higher", lease.Token(), first)
			}
		})
	}
}
