//go:build !linux

package main

import "os/exec"

// setParentDeathSignal does nothing: only Linux can tie a child's life to
// its parent's. If dlock is killed there, PROGRAM runs on without the lock.
func setParentDeathSignal(*exec.Cmd) {}
