package redisdlock

import (
	"fmt"
	"testing"
)

// lockKeys cuts four keys from one string and caches them per user key; the
// cache starts over when it is full, and a key built again is the same.
func TestLockKeys(t *testing.T) {
	d := &redisDriver{prefix: "p:"}
	want := []any{"p:{a%7Db}", "p:{a%7Db}:q", "p:{a%7Db}:w", "p:{a%7Db}:f"}
	for i := range maxCachedKeys + 2 {
		if got := d.lockKeys("a}b"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("lockKeys(%q) = %q, want %q", "a}b", got, want)
		}
		d.lockKeys(fmt.Sprint(i)) // fills the cache until it starts over
	}
	if n := d.cachedKeys.Load(); n > maxCachedKeys {
		t.Fatalf("%d keys cached, want at most %d", n, maxCachedKeys)
	}
}
