package zkdlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/errtext"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
)

// TestErrorMessages pins the text of every error a user of the ZooKeeper
// backend can see, against a real server: testdata/errors.golden. Each
// detail must appear once. Rewrite the file with -update after a deliberate
// change.
func TestErrorMessages(t *testing.T) {
	testserver.SkipIfShort(t)
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	// Roots of their own, named the same in the golden file on every run.
	stamp := time.Now().UnixNano()
	root := fmt.Sprintf("/errtext-%d", stamp)
	authRoot := fmt.Sprintf("/errtext-auth-%d", stamp)
	r := errtext.New(t, authRoot, "/AUTHROOT", root, "/ROOT")
	r.Forbid("s3cret")
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	h := &harness{srv: srv, admin: admin}

	b := errtext.URLBackend(srv.Addr(), func(addr string) string { return "zk://" + addr + root + "?session_timeout=2s" })
	b.DeleteKey = func(ctx context.Context, key string) error {
		return deleteKeyUnder(h, root, key)
	}
	// b.TTL stays zero: the lease length is the session timeout, from the URL.
	errtext.RecordCommon(ctx, t, r, b)

	// A key used as two kinds.
	kc, err := b.Open(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	kl, err := kc.Lock(ctx, "kind")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kc.Semaphore("kind", 3).TryAcquire(ctx)
	r.Record("semaphore-on-lock", err, dlock.ErrKindMismatch)
	_, err = kc.RWMutex("kind").RLock(ctx)
	r.Record("rlock-on-lock", err, dlock.ErrKindMismatch)
	if err := kl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ks, err := kc.Semaphore("kind", 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kc.Semaphore("kind", 2).Acquire(ctx)
	r.Record("semaphore-other-limit", err, dlock.ErrKindMismatch)
	_, err = kc.Lock(ctx, "kind")
	r.Record("lock-on-semaphore", err, dlock.ErrKindMismatch)
	if err := ks.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Options of New.
	conn := dialZK(t, ctx, srv.Addr(), connOpts{})
	for _, c := range []struct {
		name string
		o    *zkdlock.Options
	}{
		{"new-no-session-timeout", nil},
		{"new-session-timeout-short", &zkdlock.Options{SessionTimeout: time.Millisecond}},
		{"new-root-slash", &zkdlock.Options{SessionTimeout: time.Second, Root: "/"}},
		{"new-root-relative", &zkdlock.Options{SessionTimeout: time.Second, Root: "dlock"}},
		{"new-lock-delay-sweep-negative", &zkdlock.Options{SessionTimeout: time.Second, LockDelaySweep: -time.Second}},
	} {
		_, err := zkdlock.New(ctx, conn, c.o)
		r.Record(c.name, err, dlock.ErrInvalidOption)
	}

	// Malformed URLs. The password must never show.
	r.RecordOpen(ctx, dlock.ErrInvalidURL, [][2]string{
		{"url-no-host", "zk://"},
		{"url-port-zero", "zk://h:0"},
		{"url-root-trailing-slash", "zk://h:2181/a/"},
		{"url-root-dotdot", "zk://h:2181/a/../b"},
		{"url-unknown-parameter", "zk://u:s3cret@h:2181?bogus=1"},
		{"url-bad-duration", "zk://h:2181?session_timeout=soon"},
		{"url-session-timeout-short", "zk://h:2181?session_timeout=1ms"},
		{"url-parameter-twice", "zk://h:2181?session_timeout=1s&session_timeout=2s"},
		{"url-connect-timeout-negative", "zk://h:2181?connect_timeout=-1s"},
		{"url-user-no-password", "zk://user@h:2181"},
		{"url-fragment", "zk://h:2181#fragment"},
	})

	// Nobody listens.
	closed := testserver.Addr(testserver.FreePort(t))
	_, err = dlock.Open(ctx, "zk://"+closed+"/dlock?connect_timeout=1500ms")
	r.Record("open-unavailable", err, dlock.ErrUnavailable)

	// Refused credentials: alice's root does not let anybody else in.
	authURL := func(userinfo string) string {
		return fmt.Sprintf("zk://%s%s%s?session_timeout=2s", userinfo, srv.Addr(), authRoot)
	}
	alice, err := dlock.Open(ctx, authURL("alice:s3cret@"))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	for _, c := range []struct{ name, userinfo string }{
		{"open-auth-wrong-password", "alice:wrong@"},
		{"open-auth-other-user", "mallory:s3cret@"},
		{"open-auth-anonymous", ""},
	} {
		_, err := dlock.Open(ctx, authURL(c.userinfo))
		r.Record(c.name, err, dlock.ErrAuth)
	}

	r.Check()
}

// deleteKeyUnder deletes the lock nodes of key under root, as an operator
// might.
func deleteKeyUnder(h *harness, root, key string) error {
	path := zkdlock.KeyPathForTest(root, key)
	names, _, err := h.admin.Children(path)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := h.admin.Delete(path+"/"+n, -1); err != nil {
			return err
		}
	}
	return nil
}
