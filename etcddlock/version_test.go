package etcddlock_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The versions around each fix of the leader that revokes leases a new
// leader renewed (docs/etcd.md, "etcd versions").
func TestRevokesLiveLeases_versions(t *testing.T) {
	for v, want := range map[string]bool{
		"3.3.27":        true, // no fix on 3.3 and earlier
		"3.4.0":         true,
		"3.4.23":        true, // Debian 12's etcd-server
		"3.4.30":        true,
		"3.4.31":        false,
		"3.4.40":        false,
		"3.5.12":        true,
		"3.5.13":        false,
		"3.5.21":        false,
		"3.6.0-alpha.0": true, // what etcd's main branch called itself before and after the fix
		"3.6.0":         false,
		"3.7.3":         false,
		"4.0.0":         false,
	} {
		got, err := etcddlock.RevokesLiveLeasesForTest(v)
		if err != nil || got != want {
			t.Errorf("revokesLiveLeases(%s) = %v, %v; want %v", v, got, err, want)
		}
	}
}

// startDebianEtcd starts Debian's etcd (3.4.23), whose leader revokes
// leases a new leader renewed, with extra flags.
func startDebianEtcd(t *testing.T, flags ...string) *testserver.Etcd {
	t.Helper()
	// zap: 3.4 logs with capnslog by default, ignoring --log-level.
	return testserver.StartEtcd(t, testserver.EtcdBin(testserver.EtcdDebianBinary(t)),
		testserver.EtcdFlags(append([]string{"--logger=zap"}, flags...)...))
}

// serverVersion returns the version etcd at addr reports.
func serverVersion(t *testing.T, ctx context.Context, admin *clientv3.Client, addr string) string {
	t.Helper()
	st, err := admin.Status(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	return st.Version
}

// An etcd whose leader can revoke a live lease (here Debian's 3.4.23) is
// refused by New and Open with ErrUnsafeServer, naming the member and its
// version, and nothing is left on the server; AllowUnsafeVersion
// (allow_unsafe_version=true) accepts it, and locks then work there.
func TestOpen_refusesEtcdThatRevokesLiveLeases(t *testing.T) {
	ctx := testCtx(t)
	srv := startDebianEtcd(t)
	admin := adminClient(t, srv.Addr())
	version := serverVersion(t, ctx, admin, srv.Addr())
	if affected, err := etcddlock.RevokesLiveLeasesForTest(version); err != nil || !affected {
		t.Fatalf("Debian's etcd is %s (%v), which has the fix: the test proves nothing", version, err)
	}
	before, err := admin.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}

	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, etcddlock.ErrUnsafeServer) {
			t.Fatalf("%s on etcd %s: err = %v, want ErrUnsafeServer", what, version, err)
		}
		for _, want := range []string{version, "dlocktest", srv.Addr(), "etcd-io/etcd#15247", "allow_unsafe_version=true"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s on etcd %s: %v, want the message to name %q", what, version, err, want)
			}
		}
		// Nothing written (the revision has not moved), no lease granted.
		after, err := admin.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if after.Count != before.Count || after.Header.Revision != before.Header.Revision {
			t.Fatalf("%s refused, but the store went from %d keys at revision %d to %d at %d", what, before.Count, before.Header.Revision, after.Count, after.Header.Revision)
		}
		leases, err := admin.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(leases.Leases) != 0 {
			t.Fatalf("%s refused, but left leases %v", what, leases.Leases)
		}
	}
	cli := adminClient(t, srv.Addr())
	c, err := etcddlock.New(ctx, cli, nil)
	if err == nil {
		_ = c.Close()
	}
	refused("New", err)
	c, err = dlock.Open(ctx, srv.URL())
	if err == nil {
		_ = c.Close()
	}
	refused("Open", err)

	// Accepting the risk knowingly.
	c, err = etcddlock.New(ctx, cli, &etcddlock.Options{AllowUnsafeVersion: true})
	if err != nil {
		t.Fatalf("New with AllowUnsafeVersion on etcd %s: %v", version, err)
	}
	lockTwice(t, ctx, c)
	_ = c.Close()
	c, err = dlock.Open(ctx, srv.URL()+"?allow_unsafe_version=true")
	if err != nil {
		t.Fatalf("Open with allow_unsafe_version=true on etcd %s: %v", version, err)
	}
	lockTwice(t, ctx, c)
	_ = c.Close()
}

// lockTwice takes a key, has a second Lock wait for it, and hands it over:
// a grant, a queue and a hand-off work on the server.
func lockTwice(t *testing.T, ctx context.Context, c *dlock.Client) {
	t.Helper()
	key := t.Name()
	l, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := goLock(ctx, c, key)
	waitWaiters(t, ctx, c, key, 1)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := awaitLock(t, ctx, got)
	if l2.Token() <= l.Token() {
		t.Fatalf("second grant's token %d is not above the first's %d", l2.Token(), l.Token())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The etcd the tests build (3.7.3, like dlock serve's) has the fix: New and
// Open accept it.
func TestOpen_acceptsFixedEtcd(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedEtcd(t)
	admin := adminClient(t, srv.Addr())
	version := serverVersion(t, ctx, admin, srv.Addr())
	if affected, err := etcddlock.RevokesLiveLeasesForTest(version); err != nil || affected {
		t.Fatalf("the test etcd is %s (%v), which lacks the fix", version, err)
	}
	c, err := etcddlock.New(ctx, admin, nil)
	if err != nil {
		t.Fatalf("New on etcd %s: %v", version, err)
	}
	_ = c.Close()
	c, err = dlock.Open(ctx, srv.URL())
	if err != nil {
		t.Fatalf("Open on etcd %s: %v", version, err)
	}
	_ = c.Close()
}

// A member that advertises a client URL this client cannot reach is checked
// through the client's own endpoint, which names the member in its answer:
// refused when its version is affected, accepted when it is not.
func TestOpen_memberAdvertisesUnreachableURL_checkedThroughEndpoint(t *testing.T) {
	ctx := testCtx(t)
	dead := "--advertise-client-urls=http://" + testserver.Addr(testserver.FreePort(t))

	old := startDebianEtcd(t, dead)
	c, err := dlock.Open(ctx, old.URL())
	if err == nil {
		_ = c.Close()
	}
	if !errors.Is(err, etcddlock.ErrUnsafeServer) || !strings.Contains(err.Error(), old.Addr()) {
		t.Fatalf("Open on Debian's etcd advertising a dead URL: %v, want ErrUnsafeServer found through %s", err, old.Addr())
	}

	fixed := testserver.StartEtcd(t, testserver.EtcdFlags(dead))
	c, err = dlock.Open(ctx, fixed.URL())
	if err != nil {
		t.Fatalf("Open on a fixed etcd advertising a dead URL: %v", err)
	}
	_ = c.Close()
}

// A member that answers at none of the addresses (its advertised client URL
// is dead, and the client's endpoint, a proxy that forwards only the
// client's first connection, refuses the status request's) cannot be
// checked: New fails with ErrUnavailable naming it; AllowUnsafeVersion
// skips the check.
func TestNew_memberUnreachable_unavailable(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.StartEtcd(t, testserver.EtcdFlags("--advertise-client-urls=http://"+testserver.Addr(testserver.FreePort(t))))
	cli := adminClient(t, oneConnProxy(t, srv.Addr()))
	_, err := etcddlock.New(ctx, cli, nil)
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "dlocktest") || !strings.Contains(err.Error(), "AllowUnsafeVersion") {
		t.Fatalf("New with a member that answers nowhere: %v, want ErrUnavailable naming the member and the override", err)
	}
	c, err := etcddlock.New(ctx, cli, &etcddlock.Options{AllowUnsafeVersion: true})
	if err != nil {
		t.Fatalf("New with AllowUnsafeVersion: %v", err)
	}
	_ = c.Close()
}

// oneConnProxy listens on a loopback port, forwards the first connection
// to addr, and refuses every later one (it stops listening).
func oneConnProxy(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		_ = ln.Close()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", addr)
		if err != nil {
			_ = c.Close()
			return
		}
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		_, _ = io.Copy(c, s)
		_ = c.Close()
	}()
	return ln.Addr().String()
}
