package zkdlock

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlockdev/dlock/driver"
)

// Node layout (docs/zookeeper.md):
//
//	<root>                         persistent, created by Open/New if missing
//	<root>/<escaped key>           container: the server deletes it once empty
//	<root>/<escaped key>/<tag>-<owner>-<sequence>
//	                               ephemeral sequential: one per holder or waiter,
//	                               data = the caller's metadata (JSON);
//	                               tag = "lock" for a lock, or the kind and the
//	                               mode: "semaphore.3.s", "rwmutex.x", "rwmutex.s",
//	                               "election.x" (a candidate; the first is the leader)

// escapeKey maps a key to a node name that ZooKeeper accepts and that cannot
// reach outside its parent: '/' and '%' never appear unescaped, "." and ".."
// are escaped, and so is every character ZooKeeper refuses in a path (control
// characters, U+007F–U+009F, U+D800–U+F8FF, U+FFF0–U+FFFF, and everything
// beyond U+FFFF, which Java would store as surrogates). Escaping is %XX per
// UTF-8 byte, upper-case hex, so unescapeKey reverses it exactly.
func escapeKey(key string) string {
	if keySafe(key) {
		return key // most keys: nothing to escape, nothing to allocate
	}
	var b strings.Builder
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		if r != utf8.RuneError && nameSafe(r) {
			b.WriteString(key[i : i+size])
		} else {
			for _, c := range []byte(key[i : i+size]) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		i += size
	}
	s := b.String()
	if s == "." || s == ".." {
		s = strings.Repeat("%2E", len(s))
	}
	return s
}

// keySafe reports whether escapeKey leaves key as it is: printable ASCII
// but '/' and '%', and not "." or "..".
func keySafe(key string) bool {
	if key == "." || key == ".." {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c >= 0x7f || c == '/' || c == '%' {
			return false
		}
	}
	return true
}

// nameSafe reports whether r may appear unescaped in a node name.
func nameSafe(r rune) bool {
	switch {
	case r == '/' || r == '%':
		return false
	case r >= 0x20 && r < 0x7f:
		return true
	case r >= 0xa0 && r < 0xd800:
		return true
	case r >= 0xf900 && r < 0xfff0:
		return true
	}
	return false
}

// unescapeKey reverses escapeKey. It reports false for a name escapeKey
// cannot have produced (a node somebody else put under the root).
func unescapeKey(name string) (string, bool) {
	var b []byte
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	key := string(b)
	if key == "" || escapeKey(key) != name {
		return "", false
	}
	return key, true
}

// nodeTag names a node's kind and mode, the first part of its name: "lock"
// for a lock (as before kinds existed), else the kind's label (see
// driver.KindLabel) with '/' written '.', then ".x" for Exclusive or ".s"
// for Shared: "semaphore.3.s", "rwmutex.x", "rwmutex.s". Every client can
// so apply the grant rule, and check the kind, from one getChildren.
func nodeTag(label string, m driver.Mode) string {
	if label == "lock" && m == driver.Exclusive {
		return "lock"
	}
	c := "x"
	if m == driver.Shared {
		c = "s"
	}
	return strings.ReplaceAll(label, "/", ".") + "." + c
}

// parseTag reverses nodeTag. It reports false for a tag nodeTag cannot
// have produced.
func parseTag(tag string) (label string, m driver.Mode, ok bool) {
	if tag == "lock" {
		return "lock", driver.Exclusive, true
	}
	i := strings.LastIndexByte(tag, '.')
	if i < 0 {
		return "", 0, false
	}
	switch tag[i+1:] {
	case "x":
		m = driver.Exclusive
	case "s":
		m = driver.Shared
	default:
		return "", 0, false
	}
	label = strings.Replace(tag[:i], ".", "/", 1)
	k, limit, err := driver.ParseKindLabel(label)
	if err != nil || driver.KindLabel(k, limit) != label || nodeTag(label, m) != tag || !modeOf(k, m) {
		return "", 0, false
	}
	return label, m, true
}

// modeOf reports whether entries of kind k may ask for mode m: a lock's,
// an election's and a semaphore's entries have one mode each (dlock never
// makes the other), a read-write lock's both.
func modeOf(k driver.Kind, m driver.Mode) bool {
	switch k {
	case driver.KindLock, driver.KindElection:
		return m == driver.Exclusive
	case driver.KindSemaphore:
		return m == driver.Shared
	}
	return true
}

// nodePrefix is the name a contender asks ZooKeeper to create; the server
// appends a ten-digit sequence number. Embedding the owner (dlock's random
// 128-bit id of this attempt) is what lets a retry recognise its own node
// after a lost reply, as Curator's "protected" mode does; the tag, what the
// node asks for.
func nodePrefix(owner, label string, m driver.Mode) string {
	return nodeTag(label, m) + "-" + owner + "-"
}

// nodePath is the path a contender asks ZooKeeper to create under the key
// node keyPath: nodePrefix's name, made in one allocation.
func nodePath(keyPath, owner, label string, m driver.Mode) string {
	return keyPath + "/" + nodeTag(label, m) + "-" + owner + "-"
}

// lockNode is a parsed child of a key node: one entry of the key's queue.
type lockNode struct {
	name  string
	owner string
	seq   int64
	label string      // the kind's label (driver.KindLabel)
	mode  driver.Mode // what the entry asks for
}

// parseLockNode parses "<tag>-<owner>-<sequence>" (see nodeTag); a node of
// older dlock, "lock-<owner>-<sequence>", is a lock's Exclusive entry. The
// sequence is a signed 32-bit counter that ZooKeeper formats with %010d,
// so after 2^31 creations under one key node (which a container that
// empties now and then never reaches) it would be negative.
func parseLockNode(name string) (lockNode, bool) {
	tag, rest, ok := strings.Cut(name, "-")
	if !ok {
		return lockNode{}, false
	}
	label, mode, ok := parseTag(tag)
	if !ok {
		return lockNode{}, false
	}
	owner, seq, ok := strings.Cut(rest, "-")
	if !ok || owner == "" || !validOwner(owner) {
		return lockNode{}, false
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil {
		return lockNode{}, false
	}
	return lockNode{name: name, owner: owner, seq: n, label: label, mode: mode}, true
}

// validOwner accepts what dlock generates (hex digits); the driver refuses
// anything that could break the node name.
func validOwner(owner string) bool {
	if owner == "" || len(owner) > 128 {
		return false
	}
	for i := 0; i < len(owner); i++ {
		c := owner[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// queue parses and sorts the children of a key node by sequence: the
// order of the key's queue (see rule.go). Names that are not lock nodes
// are ignored.
func queue(children []string) []lockNode {
	return queueInto(make([]lockNode, 0, len(children)), children)
}

// queueInto is queue appending to q, which has room for children when
// the caller has one at hand.
func queueInto(q []lockNode, children []string) []lockNode {
	for _, c := range children {
		if n, ok := parseLockNode(c); ok {
			q = append(q, n)
		}
	}
	slices.SortFunc(q, func(a, b lockNode) int {
		if a.seq != b.seq {
			if a.seq < b.seq {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return q
}

// checkRoot validates a root path: absolute, no trailing '/', no empty,
// "." or ".." components, only characters ZooKeeper accepts, and not "/"
// itself (a key named "zookeeper" would collide with the server's own node).
// Its errors continue a sentence the caller begins with the root:
// `root "/a/" has an empty path component`.
func checkRoot(root string) error {
	if !strings.HasPrefix(root, "/") {
		return errors.New("must start with '/'")
	}
	if root == "/" {
		return fmt.Errorf("is the server's own root: give dlock a node of its own such as %s", DefaultRoot)
	}
	for _, part := range strings.Split(root[1:], "/") {
		switch part {
		case "":
			return errors.New("has an empty path component")
		case ".", "..":
			return errors.New("has a relative path component")
		}
		for _, r := range part {
			if r != '%' && !nameSafe(r) { // '%' is fine in a root: only keys are escaped
				return fmt.Errorf("has a character ZooKeeper refuses (%U)", r)
			}
		}
	}
	return nil
}

// nodeName is the name of the grant's lock node, for messages: its path
// would repeat the key, which dlock names already.
func (g *grant) nodeName() string { return path.Base(g.path) }
