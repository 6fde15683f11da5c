package zkdlock

import (
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// TestMark_names_roundTrip: a mark's name gives back its owner, delay and
// mode, is never taken for a lock node, and its data gives back the
// metadata, with or without the end of the delay.
func TestMark_names_roundTrip(t *testing.T) {
	owner := "0123456789abcdef0123456789abcdef"
	for _, m := range []driver.Mode{driver.Exclusive, driver.Shared} {
		name := markName(owner, 1500*time.Millisecond, m)
		got, ok := parseMark(name)
		if !ok || got.owner != owner || got.delay != 1500*time.Millisecond || got.mode != m || got.name != name {
			t.Errorf("parseMark(%q) = %+v, %v", name, got, ok)
		}
		if _, ok := parseLockNode(name); ok {
			t.Errorf("mark %q parses as a lock node", name)
		}
	}
	for _, bad := range []string{"delay-", "delay-xyz-10-x", "delay-" + owner + "-10-q", "delay-" + owner + "-60001-x", "lock-" + owner + "-0000000001"} {
		if _, ok := parseMark(bad); ok {
			t.Errorf("parseMark(%q) accepted", bad)
		}
	}
	meta := []byte(`{"host":"h"}`)
	if until, m := parseMarkData(meta); !until.IsZero() || string(m) != string(meta) {
		t.Errorf("parseMarkData(metadata) = %v, %q", until, m)
	}
	at := time.UnixMilli(1_800_000_000_123)
	if until, m := parseMarkData(untilData(at, meta)); !until.Equal(at) || string(m) != string(meta) {
		t.Errorf("parseMarkData(untilData) = %v, %q", until, m)
	}
}

// TestIndexEntry_names_roundTrip: an index entry's name gives back its key
// node and mark, for keys with '@' and escaped characters too; the index
// node is never taken for a key node.
func TestIndexEntry_names_roundTrip(t *testing.T) {
	d := &zkDriver{root: "/r"}
	mk := markName("0123456789abcdef0123456789abcdef", time.Second, driver.Shared)
	for _, key := range []string{"job", "a@b", "@", "x/y%z", ".."} {
		kp := d.keyPath(key)
		e := d.entryPath(kp, mk)
		keyName, m, ok := parseEntry(e[len(d.indexPath())+1:])
		if !ok || d.root+"/"+keyName != kp || m.name != mk {
			t.Errorf("key %q: parseEntry of %q = %q, %+v, %v", key, e, keyName, m, ok)
		}
	}
	for _, bad := range []string{"job", "job@", "@" + mk, "%zz@" + mk, "job@lock-0123456789abcdef0123456789abcdef-0000000001"} {
		if _, _, ok := parseEntry(bad); ok {
			t.Errorf("parseEntry(%q) accepted", bad)
		}
	}
	if key, ok := unescapeKey(indexName); ok {
		t.Errorf("the index node %q is key %q's node", indexName, key)
	}
}
