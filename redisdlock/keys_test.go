package redisdlock

import (
	"fmt"
	"testing"
)

// lockKeys cuts six keys from one string and caches them per user key; the
// cache starts over when it is full, and a key built again is the same. The
// slot's record and trace have a hash tag of the lock's slot.
func TestLockKeys(t *testing.T) {
	d := &redisDriver{prefix: "p:"}
	tag := fmt.Sprint(slotTags()[hashSlot("a%7Db")])
	want := []any{"p:{a%7Db}", "p:{a%7Db}:q", "p:{a%7Db}:w", "p:{a%7Db}:f", "p:tokens:{" + tag + "}", "p:released:{" + tag + "}"}
	for _, k := range want {
		if hashSlot(k.(string)) != hashSlot("a%7Db") {
			t.Fatalf("%q is in slot %d, want the lock's %d", k, hashSlot(k.(string)), hashSlot("a%7Db"))
		}
	}
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

// Every slot has a tag, and the tag maps to it.
func TestSlotTags(t *testing.T) {
	for slot, tag := range slotTags() {
		if got := hashSlot(fmt.Sprint(tag)); got != slot {
			t.Fatalf("tag %d of slot %d maps to slot %d", tag, slot, got)
		}
	}
}
