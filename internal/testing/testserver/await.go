package testserver

import (
	"context"
	"testing"
	"time"
)

// Await calls cond, with a context of 2 s, every 20 ms until it returns
// nil, and fails the test with what and cond's last error after timeout:
// for a state of the servers that sends no event to wait on (a replica's
// link up, a Sentinel's failover).
func Await(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the servers
	}
}
