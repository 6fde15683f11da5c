package redisdlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// replicated is a testserver.ReplicatedRedis with a client of its master.
type replicated struct {
	master, replica *testserver.Redis
	proxy           *faultproxy.Proxy
	admin           *redis.Client // the master
}

func startReplicated(t *testing.T) *replicated {
	t.Helper()
	rr := testserver.StartReplicatedRedis(t, nil)
	r := &replicated{master: rr.Master, replica: rr.Replica, proxy: rr.Proxy}
	r.admin = redis.NewClient(&redis.Options{Addr: r.master.Addr()})
	t.Cleanup(func() { _ = r.admin.Close() })
	return r
}

// hold stops the replication stream (both ways: the master's writes and the
// replica's acknowledgements) until the test ends or release is called.
func (r *replicated) hold(t *testing.T) (release func()) {
	r.proxy.HoldTagged(true)
	release = func() { r.proxy.HoldTagged(false) }
	t.Cleanup(release)
	return release
}

// openTest opens url as a Client closed when the test ends.
func openTest(t *testing.T, ctx context.Context, url string) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// holder reports whether the master's record of key names a holder.
func holder(t *testing.T, ctx context.Context, admin *redis.Client, key string) bool {
	t.Helper()
	n, err := admin.Exists(ctx, redisdlock.LockKeysForTest(redisdlock.DefaultPrefix, key)[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// With wait_replicas, a grant the replica did not acknowledge is not
// returned: Lock reports ErrUnavailable, naming the count, and the key is
// left free on the master.
func TestWaitReplicas_grantNotAcknowledged(t *testing.T) {
	testserver.SkipIfShort(t)
	r := startReplicated(t)
	ctx := testCtx(t)
	c := openTest(t, ctx, "redis://"+r.master.Addr()+"/0?wait_replicas=1&wait_timeout=50ms")

	l, err := c.Lock(ctx, "acked")
	if err != nil {
		t.Fatalf("Lock with the replica keeping up: %v", err)
	}
	_ = l.Unlock(ctx)

	r.hold(t)
	l, err = c.TryLock(ctx, "unacked")
	if err == nil {
		_ = l.Unlock(ctx)
		t.Fatal("TryLock returned a grant that the replica did not acknowledge")
	}
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "grant acknowledged by 0 of 1 replicas within 50ms") {
		t.Fatalf("TryLock: err = %v, want ErrUnavailable with \"grant acknowledged by 0 of 1 replicas within 50ms\"", err)
	}
	if holder(t, ctx, r.admin, "unacked") {
		t.Fatal("the unacknowledged grant is still held on the master")
	}
}

// A renewal the replica did not acknowledge is a failed renewal: the lease
// ends at its deadline although every renewal extended the key on the
// master.
func TestWaitReplicas_renewalNotAcknowledged(t *testing.T) {
	testserver.SkipIfShort(t)
	r := startReplicated(t)
	ctx := testCtx(t)
	c := openTest(t, ctx, "redis://"+r.master.Addr()+"/0?wait_replicas=1&wait_timeout=50ms")
	const ttl = time.Second
	l, err := c.Lock(ctx, "k", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	r.hold(t)
	deadline := l.Deadline()
	select {
	case <-l.Done():
	case <-time.After(20 * ttl):
		t.Fatal("the lease outlived 20 TTLs of unacknowledged renewals")
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("lease ended with %v, want ErrLeaseLost", l.Err())
	}
	if l.Deadline().After(deadline) {
		t.Errorf("an unacknowledged renewal moved the deadline from %v to %v", deadline, l.Deadline())
	}
	if !holder(t, ctx, r.admin, "k") {
		t.Error("the key is gone from the master: the renewals did not run there, so the test shows nothing")
	}
}

// A release the replica did not acknowledge has freed the key on the
// master, and Unlock says the replicas may not know.
func TestWaitReplicas_releaseNotAcknowledged(t *testing.T) {
	testserver.SkipIfShort(t)
	r := startReplicated(t)
	ctx := testCtx(t)
	c := openTest(t, ctx, "redis://"+r.master.Addr()+"/0?wait_replicas=1&wait_timeout=50ms")
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	r.hold(t)
	err = l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "release acknowledged by 0 of 1 replicas") {
		t.Fatalf("Unlock: err = %v, want ErrUnavailable with \"release acknowledged by 0 of 1 replicas\"", err)
	}
	if holder(t, ctx, r.admin, "k") {
		t.Fatal("the key is still held on the master")
	}
}

// A grant and a release send one WAIT each, pipelined behind the script;
// without wait_replicas none.
func TestWaitReplicas_commands(t *testing.T) {
	testserver.SkipIfShort(t)
	r := startReplicated(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		query string
		waits int
	}{{"", 0}, {"?wait_replicas=1", 2}} {
		c := openTest(t, ctx, "redis://"+r.master.Addr()+"/0"+tc.query)
		if err := r.admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%q: Unlock: %v", tc.query, err)
		}
		if got := commandStats(t, ctx, r.admin)["wait"]; got != tc.waits {
			t.Errorf("%q: %d WAITs for a Lock and an Unlock, want %d", tc.query, got, tc.waits)
		}
		_ = c.Close()
	}
}

func TestWaitReplicas_badOptions(t *testing.T) {
	ctx := testCtx(t)
	for url, want := range map[string]string{
		"redis://127.0.0.1:6379/0?wait_replicas=-1":                                "wait replicas -1 is negative",
		"redis://127.0.0.1:6379/0?wait_replicas=one":                               `wait_replicas: strconv.Atoi: parsing "one"`,
		"redis://127.0.0.1:6379/0?wait_replicas=1&wait_timeout=500us":              "wait timeout 500µs is below 1ms",
		"redis://127.0.0.1:6379/0?wait_replicas=1&wait_timeout=3s&read_timeout=2s": "wait timeout 3s is not below the client's read timeout 2s",
	} {
		_, err := dlock.Open(ctx, url)
		if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): err = %v, want ErrInvalidURL mentioning %q", url, err, want)
		}
	}
}

// sentinelOn starts one Sentinel monitoring r's master as "mymaster", and
// waits until it knows the replica, ready to be promoted.
func sentinelOn(t *testing.T, r *replicated) (addr string, proc *testserver.Process) {
	t.Helper()
	bin := testserver.LookBinary(t, "REDIS_SERVER_BIN", "redis-server", "apt-get install -y redis-server")
	dir := t.TempDir()
	port := testserver.FreePort(t)
	host, mport, _ := net.SplitHostPort(r.master.Addr())
	cfg := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 1\n"+
		"sentinel down-after-milliseconds mymaster 60000\nsentinel failover-timeout mymaster 5000\n", port, dir, host, mport)
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	proc = testserver.StartProcess(t, "redis-sentinel", dir, bin, []string{conf, "--sentinel", "--loglevel", "warning"})
	addr = testserver.Addr(port)
	err := proc.WaitReady(60*time.Second, func(ctx context.Context) error {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		defer sc.Close()
		reps, err := sc.Replicas(ctx, "mymaster").Result()
		if err != nil || len(reps) != 1 || reps[0]["flags"] != "slave" || reps[0]["master-link-status"] != "ok" {
			return fmt.Errorf("replicas %v (%v)", reps, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sentinel on %s: %v", addr, err)
	}
	return addr, proc
}

// failOver makes the Sentinel promote the replica, and waits until it
// names it as the master.
func failOver(t *testing.T, r *replicated, sentinel string, proc *testserver.Process) {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	_, want, _ := net.SplitHostPort(r.replica.Addr())
	asked := false
	err := proc.WaitReady(60*time.Second, func(ctx context.Context) error {
		if !asked {
			// Refused while the Sentinel is not ready to pick the replica.
			if err := sc.Failover(ctx, "mymaster").Err(); err != nil {
				return fmt.Errorf("SENTINEL FAILOVER: %w", err)
			}
			asked = true
		}
		a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		if err != nil || len(a) != 2 || a[1] != want {
			return fmt.Errorf("master is %v (%v)", a, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("failover to %s: %v", r.replica.Addr(), err)
	}
}

// A failover right after a grant, to a replica that never received it: the
// key is granted a second time without wait_replicas (the negative control:
// the set-up shows the fault), never with it. With it, a grant made while
// the replica kept up survives the failover.
func TestWaitReplicas_sentinelFailover(t *testing.T) {
	testserver.SkipIfShort(t)
	const ttl = time.Minute // the first lease outlives the test: it never needs a renewal
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait_replicas=%v", wait), func(t *testing.T) {
			r := startReplicated(t)
			sentinel, proc := sentinelOn(t, r)
			ctx := testCtx(t)
			url := "redis+sentinel://" + sentinel + "/mymaster/0"
			query := ""
			if wait {
				query = "?wait_replicas=1&wait_timeout=100ms"
			}
			first := openTest(t, ctx, url+query)

			var kept *dlock.Lease
			if wait {
				var err error
				if kept, err = first.Lock(ctx, "kept", dlock.WithTTL(ttl)); err != nil {
					t.Fatalf("Lock of kept with the replica keeping up: %v", err)
				}
			}
			r.hold(t)
			l, lockErr := first.Lock(ctx, "k", dlock.WithTTL(ttl))
			failOver(t, r, sentinel, proc)

			second := openTest(t, ctx, url)
			l2, err := second.TryLock(ctx, "k")
			if err != nil {
				t.Fatalf("TryLock of k on the new master: %v", err)
			}
			defer l2.Unlock(ctx)
			if !wait {
				if lockErr != nil {
					t.Fatalf("Lock before the failover: %v", lockErr)
				}
				if l.Err() != nil || time.Until(l.Deadline()) <= 0 {
					t.Fatalf("the first lease ended (%v) before the test could show a double grant", l.Err())
				}
				t.Logf("negative control: k granted twice, to tokens %d and %d", l.Token(), l2.Token())
				return
			}
			if lockErr == nil {
				t.Fatalf("Lock returned a grant (token %d) the replica never had: k is now granted twice (token %d)", l.Token(), l2.Token())
			}
			if !errors.Is(lockErr, dlock.ErrUnavailable) || !strings.Contains(lockErr.Error(), "0 of 1 replicas") {
				t.Fatalf("Lock: err = %v, want ErrUnavailable naming 0 of 1 replicas", lockErr)
			}
			if l3, err := second.TryLock(ctx, "kept"); !errors.Is(err, dlock.ErrLocked) {
				if err == nil {
					_ = l3.Unlock(ctx)
				}
				t.Fatalf("TryLock of kept on the new master: err = %v, want ErrLocked: the acknowledged grant did not survive", err)
			}
			_ = kept
		})
	}
}

// A waiter whose turn comes while the replica does not acknowledge is not
// granted on the hand-off's notice alone: its Lock reports ErrUnavailable.
func TestWaitReplicas_handOffNotAcknowledged(t *testing.T) {
	testserver.SkipIfShort(t)
	r := startReplicated(t)
	ctx := testCtx(t)
	url := "redis://" + r.master.Addr() + "/0?wait_replicas=1&wait_timeout=50ms"
	holderC, waiterC := openTest(t, ctx, url), openTest(t, ctx, url)
	l, err := holderC.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := waiterC.Lock(ctx, "k")
		if err == nil {
			_ = l2.Unlock(ctx)
		}
		got <- err
	}()
	waitWaiters(t, ctx, holderC, "k", 1)
	r.hold(t)
	_ = l.Unlock(ctx) // ErrUnavailable: TestWaitReplicas_releaseNotAcknowledged
	err = <-got
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "grant acknowledged by 0 of 1 replicas") {
		t.Fatalf("the waiter's Lock: err = %v, want ErrUnavailable with \"grant acknowledged by 0 of 1 replicas\"", err)
	}
}

// On a Cluster, WAIT goes to the master of the key's slot: a key of the
// master that has a replica is granted and renewed, a key of one without
// is refused.
func TestWaitReplicas_cluster(t *testing.T) {
	testserver.SkipIfShort(t)
	addrs := testserver.StartRedisCluster(t, 3)
	ctx := testCtx(t)
	admin := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer admin.Close()
	masterID, err := admin.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// A fourth node, replica of the first master (slots 0 to 5460).
	dir := t.TempDir()
	rep := testserver.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000")
	repC := redis.NewClient(&redis.Options{Addr: rep.Addr()})
	defer repC.Close()
	host, port, _ := net.SplitHostPort(addrs[0])
	if err := repC.ClusterMeet(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	// Refused until the new node has heard of the master by gossip.
	testserver.Await(t, 30*time.Second, "CLUSTER REPLICATE", func(ctx context.Context) error {
		return repC.Do(ctx, "CLUSTER", "REPLICATE", masterID).Err()
	})
	testserver.Await(t, 30*time.Second, "the replica's link up", func(ctx context.Context) error {
		info, err := repC.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica link not up: %v", err)
		}
		return nil
	})
	// A key of each kind: on the replicated master's slots, and not.
	var onReplicated, elsewhere string
	for i := 0; i < 100 && (onReplicated == "" || elsewhere == ""); i++ {
		k := fmt.Sprintf("k%d", i)
		slot, err := admin.ClusterKeySlot(ctx, redisdlock.LockKeysForTest(redisdlock.DefaultPrefix, k)[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot <= 5460 {
			onReplicated = k
		} else {
			elsewhere = k
		}
	}
	c := openTest(t, ctx, "redis+cluster://"+strings.Join(addrs, ",")+"?wait_replicas=1&wait_timeout=50ms")
	l, err := c.Lock(ctx, onReplicated, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("Lock of %s, on the master with a replica: %v", onReplicated, err)
	}
	defer l.Unlock(ctx)
	if l2, err := c.TryLock(ctx, elsewhere); !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		if err == nil {
			_ = l2.Unlock(ctx)
		}
		t.Fatalf("TryLock of %s, on a master without a replica: err = %v, want ErrUnavailable naming 0 of 1 replicas", elsewhere, err)
	}
	// Renewals acknowledged: the deadline moves on.
	d0 := l.Deadline()
	testserver.Await(t, 10*time.Second, "a renewal", func(context.Context) error {
		if l.Err() != nil {
			t.Fatalf("the lease ended: %v", l.Err())
		}
		if !l.Deadline().After(d0) {
			return fmt.Errorf("deadline still %v", d0)
		}
		return nil
	})
}
