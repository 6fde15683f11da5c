//go:build race

package redisdlock_test

// raceAllocs is what the race detector adds to an uncontended cycle's
// allocations (TestLockUnlock_allocations).
const raceAllocs = 1
