// Package keys validates lock keys once for every backend.
package keys

import (
	"errors"
	"fmt"
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

// Validate reports why key cannot be used as a lock key, or nil.
func Validate(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalid)
	}
	return validate(key, "key")
}

// ValidatePrefix is Validate for a List prefix, which may be empty.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validate(prefix, "prefix")
}

func validate(s, what string) error {
	if len(s) > MaxLen {
		return fmt.Errorf("%w: %s is %d bytes long, the limit is %d", ErrInvalid, what, len(s), MaxLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalid, what, s)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q has a control character (%U) at byte %d", ErrInvalid, what, s, r, i)
		}
	}
	return nil
}
