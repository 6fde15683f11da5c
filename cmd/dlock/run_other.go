//go:build !linux

package main

import (
	"os"
	"syscall"
)

// setParentDeathSignal does nothing: only Linux can tie a child's life to
// its parent's. The watchdog (see watchdog.go) still kills PROGRAM's
// process group if dlock is killed.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// becomeSubreaper does nothing: only Linux lets a process adopt its
// descendants' orphans. Init reaps them instead.
func becomeSubreaper() {}

// followStops reports nothing: dlock follows PROGRAM's job-control stops
// (Ctrl-Z) only on Linux, where waitid can report them without reaping.
func followStops(int) (<-chan syscall.Signal, func()) { return nil, func() {} }

// stopSelf stops dlock with sig. It is not called: see followStops.
func stopSelf(sig syscall.Signal) { _ = syscall.Kill(os.Getpid(), sig) }
