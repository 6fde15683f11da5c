package etcddlock

import (
	"fmt"
	"math"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// entryKey writes the names that clients of every version read:
// "<dir><lease id, 16 hex digits>-<n, 8 hex digits>", as fmt's %016x-%08x.
func TestEntryKey_sameAsFormat(t *testing.T) {
	for _, id := range []int64{0, 1, 0x694d9a1b2c3d, math.MaxInt64} {
		for _, n := range []uint32{0, 7, 0xabc, math.MaxUint32} {
			got, want := entryKey("dlock/a%2Fb/", clientv3.LeaseID(id), n), fmt.Sprintf("dlock/a%%2Fb/%016x-%08x", id, n)
			if got != want {
				t.Errorf("entryKey(%x, %x) = %q, want %q", id, n, got, want)
			}
		}
	}
}

// prefixEnd is clientv3.GetPrefixRangeEnd on bytes; tailBytes and isTail
// are tailKey's bytes and test.
func TestPrefixEnd_tail_sameAsStrings(t *testing.T) {
	for _, p := range []string{"", "a", "dlock/k/", "a\xff", "\xff\xff", "a\xfe\xff"} {
		if got, want := string(prefixEnd([]byte(p))), clientv3.GetPrefixRangeEnd(p); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", p, got, want)
		}
	}
	dir := "dlock/k/"
	if got, want := string(tailBytes(dir)), tailKey(dir); got != want {
		t.Errorf("tailBytes(%q) = %q, want %q", dir, got, want)
	}
	for _, k := range []string{tailKey(dir), tailKey("dlock/j/"), "dlock/k\x00tai", "dlock/k\x00tails", dir} {
		if got, want := isTail(dir, []byte(k)), k == tailKey(dir); got != want {
			t.Errorf("isTail(%q, %q) = %v, want %v", dir, k, got, want)
		}
	}
}
