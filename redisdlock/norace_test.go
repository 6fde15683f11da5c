//go:build !race

package redisdlock_test

// raceAllocs: none without the race detector (see race_test.go).
const raceAllocs = 0
