package faultinject_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/go-zookeeper/zk"
)

// Scenario 9. A ZooKeeper follower is cut off from its leader right after
// it answered a renewal of one of its clients. A holds a key through the
// follower F (and only F); B waits for the key on the leader L. A few
// milliseconds after one of A's renewals succeeds, the quorum link F↔L is
// blackholed (a fault proxy sits on F's connection to L's quorum port). The
// leader alone expires sessions, and it hears of F's clients only from F's
// replies to its pings (every half tick); a sync that F forwards does not
// touch the session there. So the leader counts A's session from the last
// ping reply it got — which reported the renewal before the last — while a
// client that counted from its last renewal would still believe in its
// lease when the leader expires the session and gives the key to B (0.8–2.8
// s before A's Done closed, in every trial of such a client). The check is
// an ordering: A's local deadline (the moment its Done is closed at the
// latest; Done and Err compare the clock with it on every call) must be
// before B's Lock returned with the key.
//
// A's pings are dropped on its way to F (as in scenario 1), so that only
// its renewals keep its session alive: the renewal before the last is then
// the last activity the leader heard of. The tick is short next to the
// session timeout (200 ms, 3 s), so that the leader's rounding up of
// expiry to a tick cannot hide a late deadline. There are three trials,
// since one whose cut falls after F's next ping reply (a few percent: the
// cut comes a few milliseconds after the renewal, the pings every 100 ms)
// cannot show a late deadline.
func TestScenario9_FollowerCutFromLeader(t *testing.T) {
	t.Parallel()
	const (
		tick   = 200 * time.Millisecond
		ttl    = 3 * time.Second
		trials = 3
	)
	e, quorum := startCutEnsemble(t, tick)
	r := newRig(t, "zk", "dlock", ttl)
	r.proto = faultproxy.ZooKeeper
	lead := e.leader()
	if lead < 1 || quorum[lead] == nil {
		t.Fatalf("leader is server %d, want 2 or 3 (mode of server 1: %q)", lead+1, e.mode(0))
	}
	if quorum[lead].Accepted() == 0 {
		t.Fatalf("server 1 follows server %d without going through its proxy: the test would cut nothing", lead+1)
	}
	r.addrs = []string{e.clients[lead]}
	r.zkc = dialZK(t, r.addrs, 10*time.Second)

	late := 0
	var worst time.Duration = -1 << 62
	for trial := range trials {
		if m := e.mode(0); m != "follower" {
			t.Fatalf("trial %d: server 1 is %q, want follower", trial, m)
		}
		if l := e.leader(); l != lead {
			t.Fatalf("trial %d: the leader moved from server %d to %d", trial, lead+1, l+1)
		}
		waitServing(t, e.clients[0])
		pa := r.proxyTo(e.clients[0])
		pa.DiscardRequests(isPing)
		a := startHolder(t, faultinject.HolderConfig{Name: "A", Backend: "zk", Addrs: []string{pa.Addr()}, TTL: ttl, Resource: r.res.Addr()}, false)
		b := startHolder(t, faultinject.HolderConfig{Name: "B", Backend: "zk", Addrs: []string{e.clients[lead]}, TTL: ttl, Resource: r.res.Addr()}, false)
		key := r.key("s9")
		if ev := a.call(faultinject.Command{Op: "lock", Key: key, Timeout: 30 * time.Second}, time.Minute); !ev.Held {
			t.Fatalf("trial %d: A could not take a free key: %s", trial, ev.Err)
		}
		from := a.mark()
		locked := b.send(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: 4*ttl + time.Minute})
		r.waitQueued(key, 2)

		// Wait for one of A's renewals (a sync, then an exists of its lock
		// node) to succeed, and cut F off from L as soon as the exists is
		// answered.
		cutAt := cutAfterRenewal(t, pa, quorum[lead])

		evB := b.await(locked, 4*ttl+2*time.Minute, "B waits for the key")
		if !evB.Held {
			t.Fatalf("trial %d: B did not get the key: %s", trial, evB.Err)
		}
		st := a.call(faultinject.Command{Op: "state"}, time.Minute)
		done, doneOK := a.awaitDone(from, ttl+10*time.Second, "A's Done")
		gap := time.Duration(st.Deadline - evB.Ret) // > 0: A's deadline after B's grant
		worst = max(worst, gap)
		if gap >= 0 {
			late++
		}
		doneText := "never closed"
		if doneOK {
			doneText = fmt.Sprintf("closed %v after the cut", time.Duration(done.At-cutAt).Round(time.Millisecond))
		}
		t.Logf("trial %d: A's deadline %v after the cut, B granted %v after the cut (A's deadline − B's grant: %v); A's Done %s; A still held it when asked after B's grant: %v",
			trial, time.Duration(st.Deadline-cutAt).Round(time.Millisecond), time.Duration(evB.Ret-cutAt).Round(time.Millisecond),
			gap.Round(time.Millisecond), doneText, st.Held)

		b.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
		quorum[lead].Restore()
		quorum[lead].Reset() // the connections of before the cut are broken anyway
		e.waitQuorum(3)
		_ = a.closeEv(true)
		_ = b.closeEv(true)
		pa.Close()
	}
	ok := late == 0
	record(t, "9 follower cut off from the leader", "zk-ensemble", "dlock, holder on the follower, waiter on the leader", verdict(ok),
		"%d trials, link cut just after a renewal succeeded: holder's deadline at or after the waiter's grant %d/%d (deadline − grant, max: %v)",
		trials, late, trials, worst.Round(time.Millisecond))
	if !ok {
		t.Errorf("A's lease outlived its session: its deadline was not before B's grant in %d of %d trials (by up to %v)", late, trials, worst.Round(time.Millisecond))
	}
}

// cutAfterRenewal watches the holder's traffic through pa for a renewal —
// a sync, then a read of a lock node (an exists, or on the lease's first
// renewal a getData with a watch; later ones need none when the holder
// made its connection with Open) — and blackholes link as soon as the read
// is answered, returning the Mono time of the cut.
func cutAfterRenewal(t *testing.T, pa, link *faultproxy.Proxy) int64 {
	t.Helper()
	obs := pa.Observe(func(f *faultproxy.Frame) bool {
		return !f.Up || f.Op == faultproxy.ZKOpSync || f.Op == faultproxy.ZKOpExists || f.Op == faultproxy.ZKOpGetData
	})
	defer obs.Stop()
	var syncXID, existsXID int32
	synced, asked := false, false
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		select {
		case f := <-obs.C:
			switch {
			case f.Up && f.Op == faultproxy.ZKOpSync && strings.Contains(f.Path, "/lock-"):
				syncXID, synced, asked = f.XID, false, false
			case !f.Up && f.XID == syncXID && syncXID != 0 && f.Err == 0:
				synced = true
			case f.Up && synced && (f.Op == faultproxy.ZKOpExists || f.Op == faultproxy.ZKOpGetData) && strings.Contains(f.Path, "/lock-"):
				existsXID, asked = f.XID, true
			case !f.Up && asked && f.XID == existsXID && f.Err == 0:
				link.Blackhole()
				return faultinject.Mono()
			}
		case <-timeout.C:
			t.Fatalf("no renewal of the holder's lease seen within a minute")
		}
	}
}

// startCutEnsemble starts a 3-node ensemble with the given tick in which
// server 1's connections to the quorum ports of servers 2 and 3 go through
// fault proxies (Raw), returned by server index. Server 1 is never the
// leader: with empty logs an election picks the highest server id among
// the voters, and every quorum of two holds server 2 or 3. So the quorum
// link of server 1 (a follower) to the leader, whichever it is, can be
// cut. The servers' configurations differ only in the address server 1
// has for the others' quorum ports (ZooKeeper keeps a static configuration
// per server when reconfiguration is disabled, as by default).
func startCutEnsemble(t *testing.T, tick time.Duration) (*zkEnsemble, map[int]*faultproxy.Proxy) {
	t.Helper()
	testserver.SkipIfShort(t)
	for attempt := 1; ; attempt++ {
		e, proxies, err := tryCutEnsemble(t, tick)
		if err == nil {
			return e, proxies
		}
		if attempt == 3 {
			t.Fatalf("zookeeper: %v", err)
		}
		t.Logf("zookeeper, attempt %d: %v; again on new ports", attempt, err)
	}
}

func tryCutEnsemble(t *testing.T, tick time.Duration) (*zkEnsemble, map[int]*faultproxy.Proxy, error) {
	const n = 3
	e := newZKEnsemble(t)
	quorumPorts := make([]int, n)
	electionPorts := make([]int, n)
	for i := range n {
		e.dirs = append(e.dirs, t.TempDir())
		e.clients = append(e.clients, testserver.Addr(testserver.FreePort(t)))
		quorumPorts[i], electionPorts[i] = testserver.FreePort(t), testserver.FreePort(t)
	}
	proxies := map[int]*faultproxy.Proxy{}
	for i := 1; i < n; i++ {
		p := faultproxy.Start(t, testserver.Addr(quorumPorts[i]), &faultproxy.Options{Protocol: faultproxy.Raw, Clock: faultinject.Mono})
		proxies[i] = p
	}
	for i, dir := range e.dirs {
		_, port, _ := net.SplitHostPort(e.clients[i])
		lines := []string{
			fmt.Sprintf("tickTime=%d", tick.Milliseconds()), "initLimit=20", "syncLimit=10",
			"dataDir=" + filepath.Join(dir, "data"),
			"clientPort=" + port, "clientPortAddress=127.0.0.1",
			"admin.enableServer=false", "4lw.commands.whitelist=*",
			"maxSessionTimeout=60000", "maxClientCnxns=0",
		}
		for j := range n {
			quorum := testserver.Addr(quorumPorts[j])
			if i == 0 && j != 0 {
				quorum = proxies[j].Addr()
			}
			host, qport, _ := net.SplitHostPort(quorum)
			lines = append(lines, fmt.Sprintf("server.%d=%s:%s:%d", j+1, host, qport, electionPorts[j]))
		}
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data", "myid"), []byte(fmt.Sprint(i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		e.procs = append(e.procs, nil)
		e.start(i)
	}
	if err := e.awaitQuorum(n, 90*time.Second); err != nil {
		for i, p := range e.procs {
			if p != nil {
				e.kill(i)
			}
		}
		for _, p := range proxies {
			p.Close()
		}
		return nil, nil, err
	}
	return e, proxies, nil
}

// waitServing waits until a client of the server at addr can write through
// it: a follower whose quorum link comes back reports "follower" while it
// may still close its clients' connections to sync with the leader, and a
// holder that opens then fails to start (its root create finds the
// connection closed). The bound is a watchdog, not an assertion.
func waitServing(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for attempt := 0; ; attempt++ {
		err := tryWrite(addr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("zookeeper %s does not serve writes after a minute: %v", addr, err)
		}
		time.Sleep(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond)
	}
}

// tryWrite opens a session on addr alone and makes one write through it.
func tryWrite(addr string) error {
	conn, ev, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopZKLogger{}))
	if err != nil {
		return err
	}
	defer conn.Close()
	timeout := time.After(10 * time.Second)
	for connected := false; !connected; {
		select {
		case e := <-ev:
			connected = e.State == zk.StateHasSession
		case <-timeout:
			return fmt.Errorf("no session after 10s")
		}
	}
	go func() {
		for range ev {
		}
	}()
	path, err := conn.Create("/dlock-ready-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		return err
	}
	return conn.Delete(path, -1)
}
