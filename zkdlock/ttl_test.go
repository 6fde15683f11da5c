package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
)

// A TTL that ZooKeeper cannot honour is refused, not ignored: every lease
// lasts the session timeout there, so a caller whose WithTTL(5s) were taken
// without a word on a client whose leases last 1s, and who relied on five
// seconds, would lose the key after one. The refusal leaves nothing on the
// server, and a TTL equal to the session timeout works.
func TestClient_Lock_ttlOtherThanSessionTimeoutRefused(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	ctx := testCtx(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	url := fmt.Sprintf("zk://%s%s?session_timeout=%v", srv.Addr(), root, testTTL)

	// At the client level, by Open.
	if c, err := dlock.Open(ctx, url, dlock.WithTTL(5*time.Second)); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "session_timeout") {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("Open with WithTTL(5s) and a 1s session: err = %v, want ErrInvalidOption that says to set session_timeout", err)
	}

	// For one lock.
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "ttl-refused"
	calls := map[string]func() error{
		"Lock": func() error {
			_, err := c.Lock(ctx, key, dlock.WithTTL(5*time.Second))
			return err
		},
		"TryLock": func() error {
			_, err := c.TryLock(ctx, key, dlock.WithTTL(5*time.Second))
			return err
		},
		"Do": func() error {
			return c.Do(ctx, key, func(context.Context) error { return errors.New("fn ran") }, dlock.WithTTL(5*time.Second))
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "1s") {
			t.Errorf("%s with WithTTL(5s) on a 1s session: err = %v, want ErrInvalidOption naming the session timeout", name, err)
		}
	}
	if ok, _, err := admin.Exists(zkdlock.KeyPathForTest(root, key)); err != nil || ok {
		t.Errorf("the refused calls left the key node on the server (exists=%v, err=%v)", ok, err)
	}

	// The session timeout itself is fine, at both levels.
	l, err := c.Lock(ctx, key, dlock.WithTTL(testTTL))
	if err != nil {
		t.Fatalf("Lock with WithTTL(session timeout): %v", err)
	}
	if l.TTL() != testTTL {
		t.Errorf("TTL = %v, want the session timeout %v", l.TTL(), testTTL)
	}
	mustUnlock(t, ctx, l)
	c2, err := dlock.Open(ctx, url, dlock.WithTTL(testTTL))
	if err != nil {
		t.Fatalf("Open with WithTTL(session timeout): %v", err)
	}
	mustUnlock(t, ctx, mustLock(t, ctx, c2, key))
	_ = c2.Close()
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(root, key))
}

// New refuses a client-level WithTTL other than Options.SessionTimeout too,
// and its error says where the lease length comes from.
func TestNew_ttlOtherThanSessionTimeoutRefused(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	ctx := testCtx(t)
	conn := dialZK(t, ctx, srv.Addr(), connOpts{})
	_, err := zkdlock.New(ctx, conn, &zkdlock.Options{Root: testRoot(t), SessionTimeout: testTTL, ClientOptions: []dlock.Option{dlock.WithTTL(3 * time.Second)}})
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "SessionTimeout") {
		t.Fatalf("New with WithTTL(3s) and a 1s session: err = %v, want ErrInvalidOption naming Options.SessionTimeout", err)
	}
}
