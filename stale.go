package dlock

import "fmt"

// StaleTokenError is the error of a fenced write that was refused because a
// newer holder had already recorded a higher fencing token for the fence. It
// satisfies errors.Is(err, ErrStaleToken); errors.As gives the tokens:
//
//	fence "close-orders": dlock: stale fencing token: 41, and 42 is recorded
//
// Package sqlfence, package httpfence, redisdlock.Fence and etcddlock's token
// fence return it with the recorded token; etcddlock.OwnerTxn and
// zkdlock.MultiHeld return it with Recorded 0, for a lease that no longer
// holds its key.
type StaleTokenError struct {
	// Fence names what was written: the fence's name.
	Fence string
	// Token is the refused writer's token.
	Token uint64
	// Recorded is the highest token the fence had recorded when it
	// refused the write; 0 when the store does not say.
	Recorded uint64
}

// Error says which fence refused which token, and the recorded one.
func (e *StaleTokenError) Error() string {
	if e.Recorded == 0 {
		return fmt.Sprintf("fence %q: %v: %d", e.Fence, ErrStaleToken, e.Token)
	}
	return fmt.Sprintf("fence %q: %v: %d, and %d is recorded", e.Fence, ErrStaleToken, e.Token, e.Recorded)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
