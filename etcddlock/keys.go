package etcddlock

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlockdev/dlock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The key layout. Each lock key K owns one directory in etcd,
//
//	<prefix><escape(K)>/
//
// holding one etcd key per holder or waiter, attached to the lease its
// Client shares among its calls of one TTL (lease.go) and named after that
// lease's id and a number the lease lends to one call at a time:
//
//	<prefix><escape(K)>/<lease id><digits of n><n>    value: metadata (JSON)
//
// The name identifies the call while it runs: a request retried after a
// lost reply finds the entry it created. Numbers are lent again after a
// release, so names are reused: etcd keeps every deleted key's name in its
// index until the next compaction, and range reads walk them, so fresh
// names for each call (the owner id) would slow every read of a busy queue
// down until then.
//
// Two more kinds of keys serve the hand-off (docs/etcd.md, "Hand-off"):
//
//	<prefix><escape(K)>/<entry name>/released  value: empty   lease: the releaser's
//	<prefix><escape(K)>\x00tail               value: the newest entry's key   lease: that entry's
//
// A release marker is written by a holder's release, in the same write as
// the delete of its entry, when somebody waits behind it: it tells the next
// waiter that the entry ahead of it went because its holder released, so
// that it holds the key without reading the queue. The tail names the
// newest entry, so that a waiter finds the entry ahead of it without
// reading (and etcd without sorting) the whole queue. Markers are the only
// keys in the directory whose name contains a '/' and whose value is empty.
//
// Entries are ordered by create revision; the grant rule (driver.Admits,
// queue.go) over the entries ahead of one says whether it holds: for a lock,
// the entry with the lowest create revision holds and the others wait in
// create-revision order. escape replaces '%' with "%25" and '/' with "%2F", so
// that the directory of "a" never contains the entries of "a/b", and so that
// the escaped form of every key that starts with P starts with escape(P):
// List(P) is one range read.

// escapeKey maps a lock key to its part of an etcd key, reversibly.
func escapeKey(k string) string {
	if !strings.ContainsAny(k, "%/") {
		return k
	}
	var b strings.Builder
	b.Grow(len(k) + 8)
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescapeKey reverses escapeKey. It reports false for text escapeKey cannot
// have produced: an etcd key under the prefix that dlock did not write.
func unescapeKey(s string) (string, bool) {
	if !strings.ContainsAny(s, "%/") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '/':
			return "", false
		case '%':
			switch s[i+1 : min(i+3, len(s))] {
			case "25":
				b.WriteByte('%')
			case "2F":
				b.WriteByte('/')
			default:
				return "", false
			}
			i += 2
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), true
}

// queueDir returns the etcd key prefix of key's holder and waiters.
func (d *etcdDriver) queueDir(key string) string { return d.prefix + escapeKey(key) + "/" }

// entryKey returns the etcd key of the entry of name n of a lease: the
// lease's id in 16 hex digits, then n in hex after the count of its digits
// ("11" for 1, "2ff" for 255). No name is a prefix of another (the count
// says where a name ends), so a watch of one entry's prefix sees that
// entry and its marker only; and names are short, because etcd keeps each
// entry's key in its index and its lease's table, and each request that
// creates one in its Raft log until its next snapshot: a fixed 8 digits
// of n and a separator made a held lock cost etcd more than a
// concurrency.Mutex's key (bench/analysis.md, Profile: etcd memory).
func entryKey(dir string, id clientv3.LeaseID, n uint32) string {
	var buf [8]byte
	digits := strconv.AppendUint(buf[:0], uint64(n), 16)
	var b strings.Builder // one allocation; Sprintf made two or three
	b.Grow(len(dir) + 16 + 1 + len(digits))
	b.WriteString(dir)
	if id < 0 { // etcd grants none; %x writes a sign
		b.WriteString(fmt.Sprintf("%016x", int64(id)))
	} else {
		writeHex(&b, uint64(id), 16)
	}
	b.WriteByte(byte('0' + len(digits)))
	b.Write(digits)
	return b.String()
}

// writeHex writes v in lower-case hexadecimal, zero-padded to width digits.
func writeHex(b *strings.Builder, v uint64, width int) {
	var buf [16]byte
	s := strconv.AppendUint(buf[:0], v, 16)
	for range width - len(s) {
		b.WriteByte('0')
	}
	b.Write(s)
}

// guardKey returns the key of a lease's guard (lease.go, fence): outside
// every directory (no lock key starts with NUL) and without a '/', so that
// no read of a queue, and no List, sees it. Short, as every request that
// creates an entry names it. Only the Client that holds the lease uses it.
func (d *etcdDriver) guardKey(id clientv3.LeaseID) string {
	return fmt.Sprintf("%s\x00g%016x", d.prefix, int64(id))
}

// markerKey returns the release marker of an entry. It starts with the
// entry's key, so one watch of that prefix sees both the entry's delete and
// the marker; no other entry's key starts with it, as no entry's name is
// a prefix of another's (entryKey).
func markerKey(entry string) string { return entry + markerSuffix }

const markerSuffix = "/released"

// tailKey returns the key that names the newest entry of a directory. It is
// outside the directory, so that reads of the queue, and TryLock's check
// that the queue is empty, never see it; no directory contains it, as an
// escaped lock key never contains a '/'.
func tailKey(dir string) string { return strings.TrimSuffix(dir, "/") + tailSuffix }

const tailSuffix = "\x00tail"

// tailBytes is tailKey as bytes, for the messages of a request that names
// the tail more than once.
func tailBytes(dir string) []byte {
	d := strings.TrimSuffix(dir, "/")
	return append(append(make([]byte, 0, len(d)+len(tailSuffix)), d...), tailSuffix...)
}

// isTail reports whether key is tailKey(dir), without building it.
func isTail(dir string, key []byte) bool {
	d := strings.TrimSuffix(dir, "/")
	return len(key) == len(d)+len(tailSuffix) && string(key[:len(d)]) == d && string(key[len(d):]) == tailSuffix
}

// isEntry reports whether an etcd key read from the directory dir is the
// entry of a holder or a waiter, not a release marker.
func isEntry(dir, etcdKey string) bool {
	name, ok := strings.CutPrefix(etcdKey, dir)
	return ok && name != "" && !strings.Contains(name, "/")
}

// What entries and the tail store. A lock's entry stores its metadata
// alone, and its tail the entry's key alone, exactly as dlock did before
// kinds existed: a key used only as a lock reads and writes the same bytes
// as an older dlock, and state an older dlock wrote is a lock's. The other
// kinds start both values with a header that JSON metadata and etcd key
// names (which start with the prefix) cannot start with:
//
//	entry: "\x00" label "\x00" mode metadata     mode: 'x' Exclusive, 's' Shared
//	tail:  "\x00" label "\x00" mode entry-key
//
// where label is driver.KindLabel ("semaphore/3", "rwmutex", "election"). The label in
// the tail is what makes a join check the key's kind in the same Txn that
// queues (see tailBounds); the mode in the tail tells a reader whether the
// newest entry is a writer, which it then waits for without reading the
// queue. (A prefix that itself starts with NUL would make a lock's tail look
// like another kind's header: such prefixes are not supported.)

// lockLabel is the label of a lock, the kind of entries without a header.
var lockLabel = driver.KindLabel(driver.KindLock, 1)

// modeByte encodes a mode in a header.
func modeByte(m driver.Mode) byte {
	if m == driver.Shared {
		return 's'
	}
	return 'x'
}

// header returns the header of an entry or tail of label and mode: empty
// for a lock.
func header(label string, m driver.Mode) string {
	if label == lockLabel && m == driver.Exclusive {
		return ""
	}
	return "\x00" + label + "\x00" + string(modeByte(m))
}

// parseHeader splits a value into its header's label and mode and the rest.
// A value without a header is a lock's (Exclusive). ok is false for a
// header that dlock cannot have written.
func parseHeader(v []byte) (label string, m driver.Mode, rest []byte, ok bool) {
	if len(v) == 0 || v[0] != 0 {
		return lockLabel, driver.Exclusive, v, true
	}
	i := bytes.IndexByte(v[1:], 0)
	if i < 0 || len(v) < i+3 {
		return "", driver.Exclusive, nil, false
	}
	label, mb, rest := string(v[1:1+i]), v[2+i], v[3+i:]
	switch mb {
	case 'x':
		m = driver.Exclusive
	case 's':
		m = driver.Shared
	default:
		return "", driver.Exclusive, nil, false
	}
	return label, m, rest, true
}

// entryValue is what an entry stores: its header and the metadata, never
// empty, so that TryLock can tell a directory holding only markers (empty
// values) from one with entries.
func entryValue(label string, m driver.Mode, md []byte) string {
	if len(md) == 0 {
		return header(label, m) + "{}"
	}
	return header(label, m) + string(md)
}

// parseEntry reads an entry's value. An entry whose header dlock cannot
// have written is reported as Exclusive with an empty label: it blocks
// everybody behind it, and matches no kind.
func parseEntry(v []byte) (label string, m driver.Mode, md []byte) {
	label, m, md, ok := parseHeader(v)
	if !ok {
		return "", driver.Exclusive, v
	}
	return label, m, md
}

// tailValue is what the tail stores when entry is the newest entry.
func tailValue(label string, m driver.Mode, entry string) string {
	return header(label, m) + entry
}

// parseTail reads the tail's value.
func parseTail(v []byte) (label string, m driver.Mode, entry string, ok bool) {
	label, m, rest, ok := parseHeader(v)
	return label, m, string(rest), ok
}

// tailBounds returns the values between which (exclusive) lie the tails
// written for entries of label: the tails of a lock start with the
// directory (they are its entries' keys), those of another kind with their
// header. A join compares the tail's value with them (etcd compares values
// byte-wise) to check, in the Txn that queues, that the newest entry is of
// the caller's kind.
func tailBounds(label, dir string) (lo, hi string) {
	if label == lockLabel {
		return dir, clientv3.GetPrefixRangeEnd(dir)
	}
	return "\x00" + label + "\x00", "\x00" + label + "\x01"
}

// entryBounds returns the bounds of the values of entries of label: above
// lo, and below hi unless hi is empty. A lock's entries store JSON metadata
// alone, which never starts with NUL; the other kinds' start with their
// header. Markers (empty values) are below every lo. A join compares every
// value of a queue without a tail with them, to queue behind entries of its
// kind in the same Txn. (A value that starts with NUL 0xFF is no kind's
// header: dlock's labels are ASCII.)
func entryBounds(label string) (lo, hi string) {
	if label == lockLabel {
		return "\x00\xff", ""
	}
	return "\x00" + label + "\x00", "\x00" + label + "\x01"
}

// splitEntry splits the etcd key of a holder or waiter into the lock key and
// the entry's name, reporting false for keys that do not follow the layout.
func (d *etcdDriver) splitEntry(etcdKey string) (key, name string, ok bool) {
	rest, ok := strings.CutPrefix(etcdKey, d.prefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	key, ok = unescapeKey(rest[:i])
	return key, rest[i+1:], ok
}
