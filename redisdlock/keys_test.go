package redisdlock

import (
	"fmt"
	"hash/maphash"
	"testing"
)

// lockKeys builds six keys and caches them per user key; a key built again
// is the same. The slot's record and trace have a hash tag of the lock's
// slot.
func TestLockKeys(t *testing.T) {
	d := &redisDriver{prefix: "p:", keys: &keyCache{seed: maphash.MakeSeed()}}
	tag := fmt.Sprint(slotTags()[hashSlot("a%7Db")])
	want := []string{"p:{a%7Db}", "p:{a%7Db}:q", "p:{a%7Db}:w", "p:{a%7Db}:f", "p:tokens:{" + tag + "}", "p:released:{" + tag + "}"}
	for _, k := range want {
		if hashSlot(k) != hashSlot("a%7Db") {
			t.Fatalf("%q is in slot %d, want the lock's %d", k, hashSlot(k), hashSlot("a%7Db"))
		}
	}
	names := func(args []any) []string {
		var out []string
		for _, a := range args {
			out = append(out, keyName(a))
		}
		return out
	}
	for i := range 2 * keyCacheSize {
		if got := names(d.lockKeys("a}b")); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("lockKeys(%q) = %q, want %q", "a}b", got, want)
		}
		k := fmt.Sprint(i)
		if got := names(d.lockKeys(k)); got[0] != "p:{"+k+"}" {
			t.Fatalf("lockKeys(%q) = %q", k, got)
		}
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
