//go:build !dlock_weak

package main

// Without the tag this would be an ordinary holder, and a negative control
// run with it would prove nothing: refuse to start.
func init() { panic("weakholder: build with -tags dlock_weak") }
