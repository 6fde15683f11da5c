package main

import (
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setParentDeathSignal makes the kernel send the child SIGKILL if dlock dies
// without stopping it (kill -9): nobody renews the lease then, so PROGRAM
// must not go on as if it held the lock. It reaches the child only; the
// watchdog (see watchdog.go) kills the rest of PROGRAM's process group.
// The signal is tied to the thread that started the child: start it from
// a goroutine locked to its thread that lives as long as the child.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// becomeSubreaper makes dlock the reaper of PROGRAM's orphans: when a
// process of PROGRAM's tree outlives its parent, it becomes dlock's child
// instead of init's. dlock can then reap the dead ones itself, and knows
// that an empty process group is really empty, whatever init (or a
// container's first process, which may never reap) does.
func becomeSubreaper() {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// followStops reports the signal that stops the child pid each time it
// stops, until stop is called. It reads stop events with waitid(WSTOPPED),
// which never reaps the child: exec.Cmd.Wait still gets its exit status.
func followStops(pid int) (stops <-chan syscall.Signal, stop func()) {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	out := make(chan syscall.Signal, 1)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for first := true; ; first = false {
			// A stop before Notify took effect sent its SIGCHLD to
			// nobody: look once without waiting for one.
			if !first {
				select {
				case <-chld:
				case <-quit:
					return
				}
			}
			for {
				sig, ok := stoppedBy(pid)
				if !ok {
					break
				}
				select {
				case out <- sig:
				case <-quit:
					return
				}
			}
		}
	}()
	return out, func() {
		signal.Stop(chld)
		close(quit)
		<-done
	}
}

// stoppedBy consumes one stop event of the child pid, if there is one, and
// returns the signal that stopped it.
func stoppedBy(pid int) (syscall.Signal, bool) {
	// siginfo_t of a SIGCHLD event: si_signo, si_errno and si_code (in
	// some order, which varies by architecture), then a union aligned
	// like a pointer whose first fields are si_pid, si_uid, si_status.
	// WNOHANG leaves it zeroed when there is no event.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOHANG, nil); err != nil {
		return 0, false
	}
	p := (*struct{ pid, uid, status int32 })(unsafe.Add(unsafe.Pointer(&info), unionOffset))
	if p.pid != int32(pid) {
		return 0, false
	}
	return syscall.Signal(p.status), true
}

// unionOffset is where the union of siginfo_t starts: after three ints,
// rounded up to the alignment of a pointer.
const unionOffset = (3*4 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)

// stopSelf stops dlock with sig, as the default action of sig does, and
// returns once dlock has been continued (or at once, if the kernel ignores
// sig, as it does for the job-control signals in an orphaned process
// group). The signal is sent to the calling thread, which then stops
// before it returns to Go: sent to the process, any thread could take it,
// a moment later, while this one went on as if it had been continued.
func stopSelf(sig syscall.Signal) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
}
