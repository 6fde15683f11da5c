//go:build !race

package zkdlock_test

const raceEnabled = false
