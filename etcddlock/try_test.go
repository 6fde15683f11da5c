package etcddlock_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// A Shared try on a queue without a tail (its newest entry left), whose
// newest keys, as many as the try's Txn reads, are release markers, goes by
// a read of the entries: a semaphore of 2 with one holder grants it. Taking
// the kind of such a queue from the missing tail would fail it with
// ErrKindMismatch ("lock").
func TestTryAcquire_noTailNewestKeysMarkers_granted(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "try-markers/" + t.Name()
	dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
	held, err := openClient(t, ctx, srv.URL()).Semaphore(key, 2).TryAcquire(ctx, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Delete(ctx, strings.TrimSuffix(dir, "/")+"\x00tail"); err != nil {
		t.Fatal(err)
	}
	markers := make([]string, 8)
	for i := range markers {
		markers[i] = fmt.Sprintf("%s%016x%s", dir, i+1, releasedSuffix)
		if _, err := admin.Put(ctx, markers[i], ""); err != nil {
			t.Fatal(err)
		}
	}
	l, err := openClient(t, ctx, srv.URL()).Semaphore(key, 2).TryAcquire(ctx, longTTL)
	if err != nil {
		t.Fatalf("TryAcquire with 1 of 2 permits held: %v, want granted", err)
	}
	for _, m := range markers {
		if _, err := admin.Delete(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkNothingStored(t, ctx, admin, key)
}
