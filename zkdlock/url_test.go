package zkdlock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

func TestOpen_badURL(t *testing.T) {
	ctx := testCtx(t)
	for _, raw := range []string{
		"zk://",
		"zk:///dlock",
		"zk://h:0",
		"zk://h:99999",
		"zk://h:2181/a/",
		"zk://h:2181/a/../b",
		"zk://h:2181?bogus=1",
		"zk://h:2181?session_timeout=soon",
		"zk://h:2181?session_timeout=1ms",
		"zk://h:2181?session_timeout=1s&session_timeout=2s",
		"zk://h:2181?connect_timeout=-1s",
		"zk://user@h:2181",
		"zk://h:2181#fragment",
		"zk://u:s3cret@h:2181?bogus=1",
		"zk://h:2181?tick_time=0s",
		"zk://h:2181?tick_time=-2s",
		"zk://h:2181?tick_time=6s",                    // more than half the default session timeout
		"zk://h:2181?session_timeout=4s&tick_time=3s", // more than half the session timeout
		"zk://h:2181?tick_time=2s&standalone=true",
		"zk://h:2181?standalone=maybe",
		"zk://h:2181?lock_delay_sweep=0s",
		"zk://h:2181?lock_delay_sweep=-1m",
		"zk://h:2181?lock_delay_sweep=often",
		"zk://h:2181?cacert=/tmp/ca.pem", // TLS parameters need zks://
		"zks://h:2181?cacert=/does/not/exist",
		"zks://h:2181?cert=/tmp/client.pem", // without key=
	} {
		_, err := dlock.Open(ctx, raw)
		if !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open(%q): err = %v, want ErrInvalidURL", raw, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q): the error shows the password: %v", raw, err)
		}
	}
}

func TestOpen_unreachable_ErrUnavailableNamesAddress(t *testing.T) {
	ctx := testCtx(t)
	addr := testserver.Addr(testserver.FreePort(t)) // nothing listens there
	_, err := dlock.Open(ctx, "zk://"+addr+"/dlock?connect_timeout=1500ms")
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Open: err = %v, want ErrUnavailable", err)
	}
	if msg := err.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, "connection refused") {
		t.Fatalf("Open: %q does not name %s and the reason", msg, addr)
	}
	_, err = dlock.Open(ctx, "zk://no-such-host.invalid:2181")
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "no-such-host.invalid") {
		t.Fatalf("Open of an unknown host: err = %v, want ErrUnavailable naming it", err)
	}
}

// TestOpen_digestAuth: a client with credentials creates its nodes with an
// ACL that lets everyone read them but only that user change or delete
// them; the wrong password, or none, fails at Open with ErrAuth.
func TestOpen_digestAuth(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	root := fmt.Sprintf("/auth-%d", time.Now().UnixNano())
	url := func(userinfo string) string {
		return fmt.Sprintf("zk://%s%s%s?session_timeout=1s", userinfo, srv.Addr(), root)
	}
	alice, err := dlock.Open(ctx, url("alice:s3cret@"))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	l, err := alice.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)

	// Another client, without the credentials, may look but not touch.
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	path := zkdlock.KeyPathForTest(root, "k")
	names := children(t, admin, path)
	if len(names) != 1 {
		t.Fatalf("lock nodes %v, want one", names)
	}
	if _, _, err := admin.Get(path + "/" + names[0]); err != nil {
		t.Errorf("reading the lock node without credentials: %v, want allowed", err)
	}
	if err := admin.Delete(path+"/"+names[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("deleting the lock node without credentials: err = %v, want zk.ErrNoAuth", err)
	}
	if _, err := admin.Create(path+"/lock-00-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("queueing without credentials: err = %v, want zk.ErrNoAuth", err)
	}

	for _, userinfo := range []string{"alice:wrong@", "mallory:s3cret@", ""} {
		c, err := dlock.Open(ctx, url(userinfo))
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, dlock.ErrAuth) {
			t.Errorf("Open as %q: err = %v, want ErrAuth", userinfo, err)
			continue
		}
		if !strings.Contains(err.Error(), srv.Addr()) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong") {
			t.Errorf("Open as %q: %q should name the address and no password", userinfo, err)
		}
	}
}

// TestOpen_usesNegotiatedSessionTimeout: the server caps session timeouts
// (the test server at 60 s). Asking for more must give a lease as long as
// what the server granted, not as long as what was asked: otherwise a
// cut-off holder would outlive its session. The lease counts from the
// session's handshake (what the leader of an ensemble is known to have
// heard), so from before Open returned.
func TestOpen_usesNegotiatedSessionTimeout(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	before := time.Now()
	c, err := dlock.Open(ctx, "zk://"+srv.Addr()+testRoot(t)+"?session_timeout=90s")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	defer l.Unlock(ctx)
	const granted = 60 * time.Second
	safe := granted - granted/100 - 2*time.Millisecond
	if d := l.Deadline(); d.Before(before.Add(safe)) || d.After(after.Add(safe)) {
		t.Fatalf("deadline %v after Open was called, want %v at most (the server's 60 s less the margin)", d.Sub(before), safe)
	}
}

func TestNew_requiresSessionTimeout(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	conn := dialZK(t, ctx, srv.Addr(), connOpts{})
	if _, err := zkdlock.New(ctx, conn, nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("New without SessionTimeout: err = %v, want ErrInvalidOption", err)
	}
	if _, err := zkdlock.New(ctx, conn, &zkdlock.Options{SessionTimeout: time.Second, Root: "/"}); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("New with root /: err = %v, want ErrInvalidOption", err)
	}
	for _, o := range []zkdlock.Options{
		{SessionTimeout: time.Second, TickTime: 600 * time.Millisecond},
		{SessionTimeout: time.Second, TickTime: -time.Millisecond},
		{SessionTimeout: time.Second, TickTime: 100 * time.Millisecond, Deployment: zkdlock.Standalone},
		{SessionTimeout: time.Second, Deployment: zkdlock.Ensemble + 1},
		{SessionTimeout: time.Second, Deployment: -1},
	} {
		if _, err := zkdlock.New(ctx, conn, &o); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("New with %+v: err = %v, want ErrInvalidOption", o, err)
		}
	}
}
