// Package keys validates lock keys once for every backend.
package keys

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxLen is the longest key, in bytes. It leaves room for a backend's prefix
// and suffixes within every server's own limits (ZooKeeper node names, etcd
// keys, Redis Cluster hash tags) while being generous for real names such as
// "orders/close-expired/eu-west-1".
const MaxLen = 256

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("dlock: invalid key")

// Validate reports why key cannot be used as a lock key, or nil. The error
// does not repeat the key: the caller names it with the operation (see
// package driver's rule for messages).
func Validate(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalid)
	}
	return validate(key)
}

// ValidatePrefix is Validate for a List prefix, which may be empty.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validate(prefix)
}

func validate(s string) error {
	if len(s) > MaxLen {
		return fmt.Errorf("%w: %d bytes long, the limit is %d", ErrInvalid, len(s), MaxLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character %U at byte %d", ErrInvalid, r, i)
		}
	}
	return nil
}

// Quote renders a key (or prefix) for an error message, as %q does, but
// cuts one longer than MaxLen, which is invalid anyway and may be huge.
func Quote(s string) string {
	const keep = 32
	if len(s) <= MaxLen {
		return strconv.Quote(s)
	}
	q := strconv.Quote(s[:keep])
	return q[:len(q)-1] + `…"`
}
