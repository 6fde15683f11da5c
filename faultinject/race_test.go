//go:build race

package faultinject_test

const raceEnabled = true
