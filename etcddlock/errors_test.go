package etcddlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/errtext"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestErrorMessages pins the text of every error a user of the etcd backend
// can see, against real servers: testdata/errors.golden. Each detail must
// appear once. Rewrite the file with -update after a deliberate change.
func TestErrorMessages(t *testing.T) {
	testserver.SkipIfShort(t)
	ctx := testCtx(t)
	srv := testserver.SharedEtcd(t)
	// A prefix of its own, named the same in the golden file on every run.
	prefix := fmt.Sprintf("errtext-%d/", time.Now().UnixNano())
	r := errtext.New(t, prefix, "PREFIX/")
	r.Forbid("s3cret")
	admin := adminClient(t, srv.Addr())

	b := errtext.URLBackend(srv.Addr(), func(addr string) string { return "etcd://" + addr + "/" + prefix })
	b.DeleteKey = func(ctx context.Context, key string) error {
		_, err := admin.Delete(ctx, etcddlock.QueueDirForTest(prefix, key), clientv3.WithPrefix())
		return err
	}
	b.TTL = 3 * time.Second
	errtext.RecordCommon(ctx, t, r, b)

	_, err := etcddlock.New(ctx, nil, nil)
	r.Record("new-nil-client", err, dlock.ErrInvalidOption)

	// A key in use as another kind: refused by the kind the queue's tail
	// (or, without one, an entry) carries.
	kc, err := b.Open(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	held, err := kc.TryLock(ctx, "km")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kc.Semaphore("km", 3).Acquire(ctx)
	r.Record("acquire-kind-mismatch-lock", err, dlock.ErrKindMismatch)
	_, err = kc.RWMutex("km").TryRLock(ctx)
	r.Record("tryrlock-kind-mismatch-lock", err, dlock.ErrKindMismatch)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err = kc.Semaphore("km", 3).TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = kc.Lock(ctx, "km")
	r.Record("lock-kind-mismatch-semaphore", err, dlock.ErrKindMismatch)
	_, err = kc.Semaphore("km", 2).TryAcquire(ctx)
	r.Record("tryacquire-kind-mismatch-limit", err, dlock.ErrKindMismatch)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Malformed URLs. The password must never show.
	r.RecordOpen(ctx, dlock.ErrInvalidURL, [][2]string{
		{"url-no-host", "etcd://"},
		{"url-empty-host", "etcd://h1,,h2"},
		{"url-unknown-parameter", "etcd://alice:s3cret@host?ttl=3s"},
		{"url-bad-duration", "etcd://host?dial_timeout=soon"},
		{"url-empty-parameter", "etcd://host?dial_timeout="},
		{"url-user-no-password", "etcd://user@host"},
		{"url-tls-parameter", "etcd://host?cacert=/certs/ca.pem"},
		{"url-cacert-missing", "etcds://host?cacert=/does/not/exist"},
		{"url-cert-without-key", "etcds://host?cert=/certs/c.pem"},
	})

	// Nobody listens.
	closed := testserver.Addr(testserver.FreePort(t))
	_, err = dlock.Open(ctx, "etcd://"+closed+"?dial_timeout=300ms")
	r.Record("open-unavailable", err, dlock.ErrUnavailable)

	// Refused credentials.
	asrv := startAuthEtcd(t, ctx, "s3cret")
	r.RecordOpen(ctx, dlock.ErrAuth, [][2]string{
		{"open-auth-wrong-password", "etcd://alice:wrong@" + asrv.Addr()},
		{"open-auth-no-user", "etcd://" + asrv.Addr()},
		{"open-auth-no-permission", "etcd://alice:s3cret@" + asrv.Addr() + "/other"},
	})

	r.Check()
}
