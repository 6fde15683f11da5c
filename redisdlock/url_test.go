package redisdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

func TestOpen_badURLs(t *testing.T) {
	ctx := testCtx(t)
	cases := map[string]string{
		"redis://127.0.0.1:6379/0?colour=blue":         `colour`,
		"redis://127.0.0.1:6379/0?waiter_timeout=soon": `waiter_timeout: time: invalid duration "soon"`,
		"redis://127.0.0.1:6379/0?prefix=a{b":          `prefix`,
		"redis://127.0.0.1:6379/zero":                  `zero`,
		"redis+sentinel://127.0.0.1:26379":             `master name`,
		"mysql://127.0.0.1:3306":                       `unknown scheme "mysql"`,
		"redis://user:s3cret@[::1":                     `cannot parse`,
		"redis://127.0.0.1:6379/0?poll_interval=1h":    `poll interval`,
		"redis://127.0.0.1:6379/0?cacert=/tmp/ca.pem":  `parameter "cacert" is for TLS: use rediss://`,
		"redis+sentinel://127.0.0.1:26379/m?cert=/c":   `parameter "cert" is for TLS: use rediss+sentinel://`,
		"redis+cluster://127.0.0.1:7000?server_name=x": `parameter "server_name" is for TLS: use rediss+cluster://`,
		"rediss://127.0.0.1:6379/0?cert=/tmp/c.pem":    `needs both cert= and key=`,
	}
	for url, want := range cases {
		_, err := dlock.Open(ctx, url)
		if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): err = %v, want ErrInvalidURL mentioning %q", url, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q): the error shows the password: %v", url, err)
		}
	}
}

func TestOpen_unreachable(t *testing.T) {
	testserver.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := testserver.Addr(testserver.FreePort(t)) // nothing listens there
	_, err := dlock.Open(ctx, "redis://"+addr+"/0?max_retries=-1")
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open of a closed port: err = %v, want ErrUnavailable naming %s", err, addr)
	}
}

func TestOpen_credentials(t *testing.T) {
	srv := testserver.StartRedis(t, "--requirepass", "s3cret")
	ctx := testCtx(t)
	for _, url := range []string{
		"redis://" + srv.Addr() + "/0",
		"redis://:wrong@" + srv.Addr() + "/0",
		"redis://nobody:s3cret@" + srv.Addr() + "/0",
	} {
		_, err := dlock.Open(ctx, url)
		if !errors.Is(err, dlock.ErrAuth) || !strings.Contains(err.Error(), srv.Addr()) {
			t.Errorf("Open(%q): err = %v, want ErrAuth naming the address", url, err)
		}
		if err != nil && strings.Contains(err.Error(), "wrong") {
			t.Errorf("Open(%q): the error shows the password: %v", url, err)
		}
	}
	c, err := dlock.Open(ctx, "redis://:s3cret@"+srv.Addr()+"/0?prefix=app1:")
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNew_unreachableNamesAddress(t *testing.T) {
	testserver.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := testserver.Addr(testserver.FreePort(t))
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	_, err := redisdlock.New(ctx, rdb, nil)
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("New on a closed port: err = %v, want ErrUnavailable naming %s", err, addr)
	}
}
