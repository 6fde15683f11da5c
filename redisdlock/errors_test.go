package redisdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/errtext"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// TestErrorMessages pins the text of every error a user of the Redis
// backend can see, against real servers: testdata/errors.golden. Each
// detail must appear once (not `lock "k": dlock: key is locked by another
// owner: key "k" is held by another owner`, which says the key and the
// category twice). Rewrite the file with -update after a deliberate change.
func TestErrorMessages(t *testing.T) {
	testserver.SkipIfShort(t)
	ctx := testCtx(t)
	srv := testserver.StartRedis(t, "--requirepass", "s3cret")
	r := errtext.New(t)
	r.Forbid("s3cret")
	url := "redis://:s3cret@" + srv.Addr() + "/0"
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "s3cret"})
	t.Cleanup(func() { _ = admin.Close() })

	b := errtext.URLBackend(srv.Addr(), func(addr string) string { return "redis://:s3cret@" + addr + "/0" })
	b.DeleteKey = func(ctx context.Context, key string) error {
		k := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)
		return admin.Del(ctx, k, k+":q", k+":w").Err()
	}
	b.TTL = 3 * time.Second
	errtext.RecordCommon(ctx, t, r, b)

	// A key used as another kind: the error names what it is.
	kc, err := b.Open(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := kc.Lock(ctx, "km"); err != nil {
		t.Fatal(err)
	} else {
		_, err = kc.Semaphore("km", 3).TryAcquire(ctx)
		r.Record("semaphore-on-lock", err, dlock.ErrKindMismatch)
		_ = l.Unlock(ctx)
	}
	if l, err := kc.Semaphore("km", 2).Acquire(ctx); err != nil {
		t.Fatal(err)
	} else {
		_, err = kc.Semaphore("km", 3).Acquire(ctx)
		r.Record("semaphore-limit-mismatch", err, dlock.ErrKindMismatch)
		_, err = kc.RWMutex("km").RLock(ctx)
		r.Record("rlock-on-semaphore", err, dlock.ErrKindMismatch)
		_ = l.Unlock(ctx)
	}

	// Options of New.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "s3cret"})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, c := range []struct {
		name string
		o    redisdlock.Options
	}{
		{"new-prefix-brace", redisdlock.Options{Prefix: "a{b"}},
		{"new-waiter-timeout-low", redisdlock.Options{WaiterTimeout: 50 * time.Millisecond}},
		{"new-poll-interval-above", redisdlock.Options{PollInterval: time.Hour}},
		{"new-wait-replicas-negative", redisdlock.Options{WaitReplicas: -1}},
	} {
		_, err := redisdlock.New(ctx, rdb, &c.o)
		r.Record(c.name, err, dlock.ErrInvalidOption)
	}

	// Malformed URLs. The password must never show.
	r.RecordOpen(ctx, dlock.ErrInvalidURL, [][2]string{
		{"url-unknown-option", url + "?colour=blue"},
		{"url-bad-duration", url + "?waiter_timeout=soon"},
		{"url-prefix-brace", url + "?prefix=a{b"},
		{"url-poll-interval-above", url + "?poll_interval=1h"},
		{"url-wait-timeout-read", url + "?wait_replicas=1&wait_timeout=3s&read_timeout=2s"},
		{"url-bad-db", "redis://:s3cret@" + srv.Addr() + "/zero"},
		{"url-sentinel-no-master", "redis+sentinel://127.0.0.1:26379"},
		{"url-sentinel-unknown-option", "redis+sentinel://u:s3cret@127.0.0.1:26379/m?sentinel_password=s3cret&colour=blue"},
		{"url-unknown-scheme", "mysql://127.0.0.1:3306"},
		{"url-unparsable", "redis://user:s3cret@[::1"},
	})

	// Nobody listens.
	closed := testserver.Addr(testserver.FreePort(t))
	_, err = dlock.Open(ctx, "redis://"+closed+"/0?max_retries=-1")
	r.Record("open-unavailable", err, dlock.ErrUnavailable)
	down := redis.NewClient(&redis.Options{Addr: closed, MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	_, err = redisdlock.New(ctx, down, nil)
	r.Record("new-unavailable", err, dlock.ErrUnavailable)

	// Refused credentials.
	r.RecordOpen(ctx, dlock.ErrAuth, [][2]string{
		{"open-auth-no-password", "redis://" + srv.Addr() + "/0"},
		{"open-auth-wrong-password", "redis://:wrong@" + srv.Addr() + "/0"},
		{"open-auth-unknown-user", "redis://nobody:s3cret@" + srv.Addr() + "/0"},
	})

	// A server that may evict lock keys.
	lru := testserver.StartRedis(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	_, err = dlock.Open(ctx, lru.URL())
	r.Record("open-unsafe-server", err, redisdlock.ErrUnsafeServer)

	r.Check()
}
