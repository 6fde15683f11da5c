package redisdlock

import (
	"encoding/base64"
	"encoding/hex"
)

// ownerLen is the length of an owner id as the scripts store it: the 128
// bits of driver.AcquireRequest.Owner in unpadded base64url.
const ownerLen = 22

// ownerArg is an owner id as the scripts take and store it. The 32 hex
// digits dlock gives are stored as 22 base64url characters, so that a
// lock's holder record stays within Redis's hash-max-listpack-value (64
// bytes by default) and its hash keeps the compact encoding: 200 bytes
// against 352 as a hashtable (MEMORY USAGE; docs/redis.md, Keys).
// The alphabet has no '|' or ':', the separators of records and notices.
// An owner that is not 32 hex digits, as the driver contract has it, is
// taken as it is, up to 32 bytes.
//
// A pointer to it is a script argument that boxes without allocating
// (go-redis sends a BinaryMarshaler's bytes), and the value is comparable:
// the notifier keys its waiters by it, with no string to allocate.
type ownerArg struct {
	b [32]byte
	n uint8
}

// newOwnerArg returns owner as the scripts store it.
func newOwnerArg(owner string) ownerArg {
	var o ownerArg
	var raw [16]byte
	if len(owner) == 32 {
		if _, err := hex.Decode(raw[:], []byte(owner)); err == nil {
			base64.RawURLEncoding.Encode(o.b[:ownerLen], raw[:])
			o.n = ownerLen
			return o
		}
	}
	o.n = uint8(copy(o.b[:], owner))
	return o
}

// MarshalBinary returns the id's bytes, as go-redis sends them.
func (o *ownerArg) MarshalBinary() ([]byte, error) { return o.b[:o.n], nil }
