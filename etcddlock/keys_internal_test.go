package etcddlock

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// entryKey writes "<dir><lease id, 16 hex digits><digits of n><n, hex>",
// and no name is a prefix of another: a watch of an entry's prefix sees
// that entry and its marker only.
func TestEntryKey_formatPrefixFree(t *testing.T) {
	var keys []string
	for _, id := range []int64{0, 1, 0x694d9a1b2c3d, math.MaxInt64} {
		for _, n := range []uint32{0, 1, 7, 0xf, 0x10, 0x11, 0xabc, 0x1000, math.MaxUint32} {
			hex := strconv.FormatUint(uint64(n), 16)
			got, want := entryKey("dlock/a%2Fb/", clientv3.LeaseID(id), n), fmt.Sprintf("dlock/a%%2Fb/%016x%d%s", id, len(hex), hex)
			if got != want {
				t.Errorf("entryKey(%x, %x) = %q, want %q", id, n, got, want)
			}
			keys = append(keys, got)
		}
	}
	if got, want := entryKey("d/", 0x694d9a1b2c3d, 1), "d/0000694d9a1b2c3d11"; got != want {
		t.Errorf("entryKey(694d9a1b2c3d, 1) = %q, want %q", got, want)
	}
	for _, a := range keys {
		for _, b := range keys {
			if a != b && strings.HasPrefix(b, a) {
				t.Errorf("entry %q is a prefix of entry %q", a, b)
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
