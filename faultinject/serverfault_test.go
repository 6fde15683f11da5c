package faultinject_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// Scenario 5. Server crashes while holders churn on one key: redis-server
// killed (SIGKILL) and restarted with and without persistence; a 3-node
// ZooKeeper ensemble with its leader, then a follower, killed and restarted;
// a Redis master killed under Sentinel, with and without its replication
// stream held back first. Double grants (two leases held at once, from the
// holders' own records) are counted and reported per backend, with token
// regressions and the fenced resource's decisions.
//
// Expected: none on ZooKeeper and on Redis with appendfsync always. Redis
// without persistence, and a Sentinel failover to a replica that had not
// received the last grant, lose locks: the suite measures it and requires
// its checker to see it (these are the negative controls of this scenario),
// and for ZooKeeper a holder told a lease three times its session timeout
// (the misconfiguration zkdlock's documentation warns about) is cut off and
// must be caught; for etcd, a holder of the weak build (validity from the
// reply) with slow replies is cut off and must be caught.
func TestScenario5_ServerFaults(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Run("appendfsync always", func(t *testing.T) {
			a, n := runRedisRestarts(t, true)
			ok := a.overlaps == 0 && a.regressions == 0 && a.staleOK == 0
			record(t, "5 server crash", "redis", "dlock, appendonly yes, appendfsync always", verdict(ok),
				"%d kill -9 + restart with a lock held, %d leases: double grants %d, token regressions %d, stale writes accepted %d",
				n, a.leases, a.overlaps, a.regressions, a.staleOK)
			if !ok {
				t.Errorf("double grants with persistence: %v", a.examples)
			}
		})
		t.Run("no persistence", func(t *testing.T) {
			a, n := runRedisRestarts(t, false)
			record(t, "5 server crash", "redis", "dlock, no persistence (expected to lose locks)", caught(a.overlaps > 0),
				"%d kill -9 + restart with a lock held, %d leases: double grants %d (e.g. %v), token regressions %d, stale writes accepted %d",
				n, a.leases, a.overlaps, first(a.examples), a.regressions, a.staleOK)
			if a.overlaps == 0 {
				t.Errorf("a restart without persistence lost no lock: the double-grant checker never fired")
			}
			if a.regressions != 0 || a.staleOK != 0 {
				t.Errorf("tokens went down across a restart without persistence: %d regressions", a.regressions)
			}
		})
	})
	t.Run("zk-ensemble", func(t *testing.T) { runZKEnsemble(t) })
	t.Run("etcd-cluster", func(t *testing.T) { runEtcdCluster(t) })
	t.Run("redis-sentinel", func(t *testing.T) {
		t.Run("failover", func(t *testing.T) {
			a, took := runSentinel(t, false)
			record(t, "5 server crash", "redis-sentinel", "dlock, master killed, replica in sync", "measured",
				"failover took %v; %d leases: double grants %d, token regressions %d, stale writes accepted %d",
				took.Round(time.Millisecond), a.leases, a.overlaps, a.regressions, a.staleOK)
		})
		t.Run("failover, replication held", func(t *testing.T) {
			a, took := runSentinel(t, true)
			record(t, "5 server crash", "redis-sentinel", "dlock, master killed before its last grant replicated (expected to lose it)", caught(a.overlaps > 0),
				"failover took %v; %d leases: double grants %d (e.g. %v), token regressions %d, stale writes accepted %d",
				took.Round(time.Millisecond), a.leases, a.overlaps, first(a.examples), a.regressions, a.staleOK)
			if a.overlaps == 0 {
				t.Errorf("the failover to a stale replica lost no lock: the double-grant checker never fired")
			}
		})
	})
}

func first(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return s[0]
}

// waitHeld waits until somebody holds key on the Redis server behind rdb.
func waitHeld(t *testing.T, r *rig, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := r.rdb.Exists(ctx, r.redisKeys(key)[0]).Result()
		cancel()
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nobody held %s within 20s: %v", key, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the server
	}
}

func runRedisRestarts(t *testing.T, persist bool) (analysis, int) {
	var extra []string
	if persist {
		extra = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	// Leases of 2 s renewed every 667 ms, held up to 1.5 s; waiters poll
	// every 333 ms: after a restart that lost the key, a waiter usually
	// asks before the holder's next renewal tells it — usually, not
	// always, so there are restarts enough that the negative control
	// (no persistence) misses the double grant with odds of about 1 in
	// 3^restarts.
	const restarts = 6
	r := newRedisRig(t, "dlock", 2*time.Second, extra...)
	c := startChurn(t, r, 3, 14*time.Second, 1500*time.Millisecond, false, false)
	n := 0
	for n < restarts && c.running() {
		time.Sleep(time.Second) // the schedule: a crash a second
		waitHeld(t, r, c.key)
		r.redis.Restart()
		n++
	}
	return analyse(t, c.wait(t), c.checked, c.unchkd, false), n
}

func runZKEnsemble(t *testing.T) {
	e := startZKEnsemble(t, 3)
	const ttl = 2 * time.Second
	// The rig belongs to the subtest that uses it: its holders fail that
	// test, not this one (a Fatalf on the parent from a subtest ends in
	// "test executed panic(nil) or runtime.Goexit").
	newEnsembleRig := func(t *testing.T) *rig {
		r := newRig(t, "zk", "dlock", ttl)
		r.addrs, r.proto = e.clients, faultproxy.ZooKeeper
		r.zkc = dialZK(t, e.clients, 10*time.Second)
		return r
	}
	t.Run("leader and follower killed", func(t *testing.T) {
		runLeaderFollowerKills(t, newEnsembleRig(t), "zk-ensemble", "ZooKeeper",
			cluster{leader: e.leader, kill: e.kill, start: e.start, waitUp: e.waitQuorum})
	})
	t.Run("lease longer than the session", func(t *testing.T) {
		r := newEnsembleRig(t)
		var proxies []*faultproxy.Proxy
		var addrs []string
		for _, a := range e.clients {
			p := r.proxyTo(a)
			proxies = append(proxies, p)
			addrs = append(addrs, p.Addr())
		}
		victim := startHolder(t, faultinject.HolderConfig{Name: "victim", Backend: "zk", Addrs: addrs, TTL: ttl,
			ClaimedTimeout: 3 * ttl, Resource: r.res.Addr()}, false)
		runCutOffVictim(t, r, victim, proxies, ttl, nil,
			"zk-ensemble", "lease told 3× the session timeout, holder cut off for 2× it")
	})
}

// runSentinel: holders with 2 s leases churn through Sentinel; a victim
// with a 15 s lease (renewed every 5 s) takes the key, the master is killed
// and Sentinel promotes the replica. With holdReplication the victim's grant
// never reached the replica: the others get the key on the new master while
// the victim, which has not renewed yet, still holds it.
func runSentinel(t *testing.T, holdReplication bool) (analysis, time.Duration) {
	st := startSentinelTopology(t)
	const ttl, victimTTL = 2 * time.Second, 15 * time.Second
	r := newRig(t, "redis-sentinel", "dlock", ttl)
	r.addrs, r.proto, r.rdb, r.master = st.sentinels, faultproxy.RESP, st.admin, "mymaster"
	victim := r.holderTTL("victim", false, victimTTL)
	c := startChurn(t, r, 2, 4*ttl, 300*time.Millisecond, false, false)
	time.Sleep(time.Second) // the schedule
	if holdReplication {
		st.proxy.HoldTagged(true)
	}
	lease := recordVictim(victim, lockVictim(t, victim, c.key))
	killed := time.Now()
	st.master.Kill()
	testserver.Await(t, time.Minute, "failover", st.failedOver)
	took := time.Since(killed)
	leases := c.wait(t)
	return analyse(t, append(leases, lease.end()), c.checked, c.unchkd, false), took
}

func runEtcdCluster(t *testing.T) {
	e := startEtcdCluster(t, 3)
	t.Run("leader and follower killed", func(t *testing.T) {
		runLeaderFollowerKills(t, etcdRig(t, e, "dlock", etcdTTL), "etcd-cluster", "etcd",
			cluster{leader: e.leader, kill: e.kill, start: e.start, waitUp: e.waitLeader})
	})
	t.Run("weak lease engine cut off", func(t *testing.T) {
		r := etcdRig(t, e, "dlock", etcdTTL)
		var proxies []*faultproxy.Proxy
		for _, a := range e.clients {
			p := r.proxyTo(a)
			p.SetLatency(0, 800*time.Millisecond)
			proxies = append(proxies, p)
		}
		victim := r.holder("victim", true, proxies...)
		// Cut it off just after a renewal, whose slow reply the weak
		// engine counts from.
		afterRenewal := func(lock faultinject.Event) { waitRenewed(t, victim, lock.Deadline, etcdTTL) }
		runCutOffVictim(t, r, victim, proxies, etcdTTL, afterRenewal,
			"etcd-cluster", "dlock_weak holder with 800 ms replies, cut off for 2 TTL")
	})
}

// cluster is a 3-node ensemble or cluster whose members the suite kills:
// waitUp(n) waits until n members serve under one leader.
type cluster struct {
	leader              func() int
	kill, start, waitUp func(int)
}

// runLeaderFollowerKills churns holders on r while the cluster's leader,
// then a follower, is killed with SIGKILL and restarted, and requires no
// double grant, no token regression and no stale write accepted. backend
// names the topology in the report, server in the failure.
func runLeaderFollowerKills(t *testing.T, r *rig, backend, server string, cl cluster) {
	c := startChurn(t, r, 3, 12*time.Second, 200*time.Millisecond, false, false)
	time.Sleep(time.Second) // the schedule
	l := cl.leader()
	if l < 0 {
		t.Fatalf("no %s leader", server)
	}
	killed := time.Now()
	cl.kill(l)
	cl.waitUp(2)
	election := time.Since(killed)
	cl.start(l)
	cl.waitUp(3)
	time.Sleep(time.Second) // the schedule
	f := (cl.leader() + 1) % 3
	cl.kill(f)
	cl.waitUp(2)
	cl.start(f)
	cl.waitUp(3)
	a := analyse(t, c.wait(t), c.checked, c.unchkd, false)
	ok := a.overlaps == 0 && a.regressions == 0 && a.staleOK == 0
	record(t, "5 server crash", backend, "dlock, leader then follower kill -9 + restart", verdict(ok),
		"new leader %v after the kill; %d leases: double grants %d, token regressions %d, stale writes accepted %d",
		election.Round(time.Millisecond), a.leases, a.overlaps, a.regressions, a.staleOK)
	if !ok {
		t.Errorf("double grants on %s: %v", server, a.examples)
	}
}

// runCutOffVictim is a negative control: the victim, whose clients go
// through proxies, takes a key on r that two holders then churn on (with
// leases of ttl), and is cut off from every server for 2 ttl once beforeCut
// (if any) returns. It must lose its lock while it still believes it holds
// it, and the checker must see the double grant.
func runCutOffVictim(t *testing.T, r *rig, victim *proc, proxies []*faultproxy.Proxy, ttl time.Duration,
	beforeCut func(lock faultinject.Event), backend, variant string) {
	key := r.key("victim")
	ev := lockVictim(t, victim, key)
	c := startChurnOn(t, r, key, 2, 3*ttl+2*time.Second, 200*time.Millisecond, false, false)
	lease := recordVictim(victim, ev)
	if beforeCut != nil {
		beforeCut(ev)
	}
	partition(proxies, 2*ttl)
	rec := lease.end() // while the churn still runs
	a := analyse(t, append(c.wait(t), rec), c.checked, c.unchkd, false)
	record(t, "5 server crash", backend, variant, caught(a.overlaps > 0),
		"double grants %d (e.g. %v)", a.overlaps, first(a.examples))
	if a.overlaps == 0 {
		t.Errorf("negative control missed: no double grant")
	}
}

// lockVictim has the victim take key, waiting for it, and fails the test if
// it does not get it.
func lockVictim(t *testing.T, victim *proc, key string) faultinject.Event {
	t.Helper()
	ev := victim.call(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: time.Minute}, 2*time.Minute)
	if !ev.Held {
		t.Fatalf("the victim did not get the key: %s", ev.Err)
	}
	return ev
}

// victimLease is the record of the victim's lease, kept by the test: the
// churn's records do not include it.
type victimLease struct {
	p    *proc
	rec  faultinject.LeaseRecord
	from int // the victim's notices from here on are about this lease
}

// recordVictim starts the record of the victim's lease from its lock reply.
func recordVictim(victim *proc, lock faultinject.Event) *victimLease {
	return &victimLease{p: victim, from: victim.mark(),
		rec: faultinject.LeaseRecord{Holder: "victim", Token: lock.Token, LockCall: lock.Call, LockRet: lock.Ret}}
}

// end completes the record, for the checker: the victim's deadline, the
// moment its Done closed (if it has), and its unlock.
func (v *victimLease) end() faultinject.LeaseRecord {
	st := v.p.call(faultinject.Command{Op: "state"}, time.Minute)
	v.rec.Deadline = st.Deadline
	if done, ok := v.p.awaitDone(v.from, 0, ""); ok {
		v.rec.DoneAt = done.At
	}
	u := v.p.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
	v.rec.UnlockCall, v.rec.UnlockRet, v.rec.UnlockKind = u.Call, u.Ret, u.Kind
	return v.rec
}

// partition blackholes every proxy for d, then restores them.
func partition(proxies []*faultproxy.Proxy, d time.Duration) {
	for _, p := range proxies {
		p.Blackhole()
	}
	time.Sleep(d) // the partition
	for _, p := range proxies {
		p.Restore()
	}
}
