package main

import (
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// group is PROGRAM's process group: PROGRAM, started as its leader, and
// every process PROGRAM starts that stays in it (a shell's commands, a
// build's compilers). dlock signals the whole group, not PROGRAM alone, so
// that nothing of PROGRAM's work runs on without the lock.
//
// What the group does not hold: a process that calls setsid or setpgid
// (daemons, shells with job control) leaves it, and dlock cannot stop it;
// only a cgroup could hold a tree that tries to escape.
type group struct {
	cmd    *exec.Cmd
	pgid   int
	exited chan error // receives cmd.Wait's result
	tty    *terminal  // the terminal PROGRAM was given, or nil
	dog    *watchdog  // nil if it could not be started
	reaped bool       // PROGRAM has been waited for: reaping the group is safe
}

// startGroup starts cmd as the leader of a new process group. When dlock
// runs in the foreground of a terminal (stdin is its controlling terminal,
// and dlock's process group owns it), the new group gets the terminal, as
// a shell's job would, so that PROGRAM can read from it and gets Ctrl-C
// from it directly. dog, if not nil, is armed with the group before this
// returns.
func startGroup(cmd *exec.Cmd, stdin io.Reader, dog *watchdog) (*group, error) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	tty := foregroundTerminal(stdin)
	if tty != nil {
		attr.Foreground, attr.Ctty = true, tty.fd
	}
	setParentDeathSignal(attr)
	cmd.SysProcAttr = attr
	g := &group{cmd: cmd, exited: make(chan error, 1), tty: tty, dog: dog}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal is tied to the thread that started
		// the child: keep this thread to this goroutine, which ends only
		// once the child has.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		g.exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		// The child may have taken the terminal before exec failed.
		g.tty.reclaim()
		return nil, err
	}
	g.pgid = cmd.Process.Pid
	if dog != nil {
		// Until this write, a SIGKILL of dlock leaves PROGRAM's children
		// (started in these few microseconds) to run on; PROGRAM itself
		// gets the parent-death signal on Linux.
		if err := dog.arm(g.pgid); err != nil {
			// The watchdog died: go on without, as if it had not
			// started.
			dog.stop(false)
			g.dog = nil
		}
	}
	return g, nil
}

// signal sends sig to every process of the group. It reports false when
// the group is gone.
func (g *group) signal(sig syscall.Signal) bool {
	return syscall.Kill(-g.pgid, sig) != syscall.ESRCH
}

// markReaped records that cmd.Wait has returned.
func (g *group) markReaped() { g.reaped = true }

// empty reports whether no process of the group is left. Once PROGRAM has
// been waited for, it first reaps the group's dead processes that are
// dlock's children (orphans, on Linux, where dlock is their subreaper): a
// zombie still counts as a member. Before that it must not, as it could
// reap PROGRAM from under exec.Cmd.Wait.
func (g *group) empty() bool {
	if g.reaped {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-g.pgid, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	// Signal 0 checks existence (and permission) without sending
	// anything: ESRCH means no process has this process group.
	return syscall.Kill(-g.pgid, 0) == syscall.ESRCH
}

// suspend stops dlock as PROGRAM was stopped, by sig (Ctrl-Z, or reading
// the terminal in the background), so that the shell that started dlock
// sees its job stop and takes the terminal back; when the shell resumes
// dlock (fg or bg), PROGRAM gets the terminal again if dlock has it, and
// SIGCONT. While dlock is stopped, nobody renews the lease: it is lost if
// the job stays stopped for longer than the TTL, and dlock stops PROGRAM
// once resumed. Only a group that was given the terminal is followed: a
// shell's job control is the only thing that resumes it.
func (g *group) suspend(sig syscall.Signal) {
	if g.tty == nil {
		return
	}
	switch sig {
	case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
	default:
		return // SIGSTOP from somebody: theirs to undo
	}
	stopSelf(sig)
	// Here once continued. In an orphaned process group the kernel
	// ignores the signal and we are here at once: PROGRAM goes on, as if
	// nothing had happened, rather than stay stopped for ever.
	if g.tty.ours() {
		g.tty.give(g.pgid)
	}
	g.signal(syscall.SIGCONT)
}

// finish ends dlock's part: it disarms and stops the watchdog (leaving it
// armed if the group is not empty: then it kills what is left when dlock
// exits), and takes the terminal back.
func (g *group) finish() {
	if g.dog != nil {
		g.dog.stop(g.empty())
	}
	g.tty.reclaim()
}

// terminal is the controlling terminal that dlock hands to PROGRAM's group.
type terminal struct{ fd int }

// foregroundTerminal returns stdin's terminal if it is dlock's controlling
// terminal and dlock's process group is in its foreground, and nil
// otherwise (a pipe, a file, a background job).
func foregroundTerminal(stdin io.Reader) *terminal {
	f, ok := stdin.(*os.File)
	if !ok {
		return nil
	}
	t := &terminal{fd: int(f.Fd())}
	if !t.ours() {
		return nil
	}
	return t
}

// ours reports whether dlock's process group is the terminal's foreground
// group. TIOCGPGRP fails on anything but the caller's controlling terminal.
func (t *terminal) ours() bool {
	pgrp, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// give makes pgid the terminal's foreground group.
func (t *terminal) give(pgid int) { t.setForeground(pgid) }

// reclaim makes dlock's group the terminal's foreground group again, so
// that dlock's last messages and the shell after it find the terminal as
// they left it. It does nothing for a nil terminal.
func (t *terminal) reclaim() {
	if t != nil {
		t.setForeground(syscall.Getpgrp())
	}
}

// setForeground is tcsetpgrp. A process outside the foreground group that
// calls it gets SIGTTOU, which would stop dlock, unless it ignores SIGTTOU:
// it does, for the call.
func (t *terminal) setForeground(pgid int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	// It fails for a group that no longer exists: nothing to do then.
	_ = unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, pgid)
}
