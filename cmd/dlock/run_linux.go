package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel send PROGRAM SIGKILL if dlock dies
// without stopping it (kill -9): nobody renews the lease then, so PROGRAM
// must not go on as if it held the lock.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
