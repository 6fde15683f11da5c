package redisdlock_test

import (
	"context"
	"testing"

	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLockUnlock is the uncontended cycle on one key, the common path:
// Lock and Unlock of a free key on one Client, against the server TestMain
// started. Profile it with
//
//	go test -run '^$' -bench LockUnlock -benchmem -cpuprofile cpu.out -memprofile mem.out
func BenchmarkLockUnlock(b *testing.B) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Lock(ctx, "bench-cycle")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
