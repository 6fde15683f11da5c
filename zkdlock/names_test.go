package zkdlock

import (
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/keys"
)

// zkAcceptsName applies ZooKeeper's PathUtils.validatePath to one node name,
// in Java's UTF-16 code units: no NUL, no control characters, no
// U+007F–U+009F, no U+D800–U+F8FF (which includes the surrogates that encode
// every character beyond U+FFFF), no U+FFF0–U+FFFF, and not "." or "..".
func zkAcceptsName(name string) bool {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return false
	}
	for _, u := range utf16.Encode([]rune(name)) {
		switch {
		case u <= 0x1f, u >= 0x7f && u <= 0x9f, u >= 0xd800 && u <= 0xf8ff, u >= 0xfff0:
			return false
		}
	}
	return true
}

func TestEscapeKey(t *testing.T) {
	for key, want := range map[string]string{
		"orders/close-expired": "orders%2Fclose-expired",
		"a/../b":               "a%2F..%2Fb",
		"..":                   "%2E%2E",
		".":                    "%2E",
		"...":                  "...",
		"/":                    "%2F",
		"100%":                 "100%25",
		"key with spaces":      "key with spaces",
		"ключ":                 "ключ",
		"😀":                    "%F0%9F%98%80",
		"\ue000":               "%EE%80%80", // private use: ZooKeeper refuses it
		"\ufffd":               "%EF%BF%BD",
		"{x}:*":                "{x}:*",
		"zookeeper":            "zookeeper",
	} {
		got := escapeKey(key)
		if got != want {
			t.Errorf("escapeKey(%q) = %q, want %q", key, got, want)
		}
		if !zkAcceptsName(got) {
			t.Errorf("escapeKey(%q) = %q, which ZooKeeper refuses", key, got)
		}
		if back, ok := unescapeKey(got); !ok || back != key {
			t.Errorf("unescapeKey(%q) = %q, %v, want %q", got, back, ok, key)
		}
	}
}

func TestUnescapeKey_rejectsForeignNames(t *testing.T) {
	for _, name := range []string{"", "%", "%2", "%zz", "%2e%2e", "a%2fb", "%41", "%2E%41", "a%2F%2E%2E", "%2E%2E%2E"} {
		if key, ok := unescapeKey(name); ok {
			t.Errorf("unescapeKey(%q) = %q, true; want false (escapeKey never produces it)", name, key)
		}
	}
}

// FuzzEscapeKey: every valid key maps to a node name that ZooKeeper accepts,
// that stays inside its parent, and that maps back to the same key.
func FuzzEscapeKey(f *testing.F) {
	for _, s := range []string{"a", "..", "a/b", "%", "😀", "\u0085", "\u2028", "\ud7ff\uf900", strings.Repeat("é", 128)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if keys.Validate(key) != nil {
			return
		}
		name := escapeKey(key)
		if !zkAcceptsName(name) || !utf8.ValidString(name) {
			t.Fatalf("escapeKey(%q) = %q, which ZooKeeper refuses", key, name)
		}
		back, ok := unescapeKey(name)
		if !ok || back != key {
			t.Fatalf("unescapeKey(escapeKey(%q)) = %q, %v", key, back, ok)
		}
	})
}

func TestParseLockNode(t *testing.T) {
	owner := strings.Repeat("ab", 16)
	for name, want := range map[string]lockNode{
		"lock-" + owner + "-0000000007":  {owner: owner, seq: 7, label: "lock"},
		"lock-" + owner + "--2147483648": {owner: owner, seq: -2147483648, label: "lock"},
	} {
		got, ok := parseLockNode(name)
		want.name = name
		if !ok || got != want {
			t.Errorf("parseLockNode(%q) = %+v, %v, want %+v", name, got, ok, want)
		}
	}
	for _, name := range []string{"lock-", "lock--0000000001", "lock-xyz-0000000001", "lock-ab", "_c_ab-lock-0000000001", "lock-ab-12x"} {
		if n, ok := parseLockNode(name); ok {
			t.Errorf("parseLockNode(%q) = %+v, want not a lock node", name, n)
		}
	}
	q := queue([]string{"lock-b-0000000010", "foreign", "lock-a-0000000002", "lock-c-0000000009"})
	var got []string
	for _, n := range q {
		got = append(got, n.owner)
	}
	if strings.Join(got, "") != "acb" {
		t.Errorf("queue order %v, want a c b (by sequence)", got)
	}
}

func TestCheckRoot(t *testing.T) {
	for _, ok := range []string{"/dlock", "/a/b/c", "/my app", "/100%"} {
		if err := checkRoot(ok); err != nil {
			t.Errorf("checkRoot(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/", "dlock", "/a/", "/a//b", "/a/../b", "/a/.", "/a\x00", "/\ue000"} {
		if err := checkRoot(bad); err == nil {
			t.Errorf("checkRoot(%q) = nil, want an error", bad)
		}
	}
}

// TestNodeTag_modes: the tag in a node's name says the kind and the mode;
// a lock's node keeps the name older dlock gave it, and names that no
// kind produces are not lock nodes.
func TestNodeTag_modes(t *testing.T) {
	owner := strings.Repeat("cd", 16)
	for _, tc := range []struct {
		label string
		mode  driver.Mode
		name  string
	}{
		{"lock", driver.Exclusive, "lock-" + owner + "-0000000001"},
		{"semaphore/3", driver.Shared, "semaphore.3.s-" + owner + "-0000000001"},
		{"rwmutex", driver.Exclusive, "rwmutex.x-" + owner + "-0000000001"},
		{"rwmutex", driver.Shared, "rwmutex.s-" + owner + "-0000000001"},
		{"election", driver.Exclusive, "election.x-" + owner + "-0000000001"},
	} {
		if got := nodePrefix(owner, tc.label, tc.mode) + "0000000001"; got != tc.name {
			t.Errorf("nodePrefix(%s, %v) gives %q, want %q", tc.label, tc.mode, got, tc.name)
		}
		n, ok := parseLockNode(tc.name)
		if !ok || n.label != tc.label || n.mode != tc.mode || n.owner != owner || n.seq != 1 {
			t.Errorf("parseLockNode(%q) = %+v, %v", tc.name, n, ok)
		}
	}
	for _, tag := range []string{"semaphore.0.s", "semaphore.03.s", "semaphore.3.q", "semaphore.3", "rwmutex", "bogus.x", "lock.x.x", "election.s", "election", "semaphore.3.x", "lock.s"} {
		if n, ok := parseLockNode(tag + "-" + owner + "-0000000001"); ok {
			t.Errorf("tag %q parsed as %+v, want not a lock node", tag, n)
		}
	}
}
