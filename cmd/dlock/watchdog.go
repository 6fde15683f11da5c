package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// watchdogCommand is the hidden subcommand of the watchdog process.
const watchdogCommand = "run-watchdog"

// A watchdog kills PROGRAM's process group if dlock dies without doing so,
// even by SIGKILL, which no process can catch: nobody renews the lease then,
// and PROGRAM's work must not run on without it. The parent-death signal
// reaches PROGRAM alone (and only on Linux), not the processes PROGRAM
// started.
//
// It is dlock's own binary, run with a hidden subcommand in a process group
// of its own (so that a signal to dlock's group, or to PROGRAM's, does not
// reach it), and it holds the read end of a pipe whose write end only dlock
// has. dlock writes PROGRAM's process group id to it once PROGRAM runs, and
// 0 once the group is empty. The kernel closes the write end when dlock
// exits, however it exits: the watchdog then reads end-of-file and, if the
// last id it read is not 0, sends SIGKILL to that group.
//
// Limits. A process that left the group (setsid, setpgid) is not killed. If
// dlock dies in the microseconds between starting PROGRAM and writing its
// group id, processes PROGRAM started in that time run on. If dlock dies
// after the group emptied and before it wrote 0, the kernel may in theory
// have given the id to a new group by then (pid reuse): the watchdog would
// kill that one. And a SIGKILL of the watchdog and dlock together (the OOM
// killer, kill -9 of both) leaves the group to run on; a cgroup (systemd's
// KillMode=control-group, a container) is the answer there.
type watchdog struct {
	cmd  *exec.Cmd
	w    *os.File      // the write end of the pipe
	done chan struct{} // closed when the watchdog has exited
}

// startWatchdog starts the watchdog process, which reports on stderr.
func startWatchdog(stderr io.Writer) (*watchdog, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// os.Pipe's descriptors are close-on-exec: PROGRAM never holds the
	// write end, whose closing must mean that dlock is gone.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(exe, watchdogCommand, strconv.Itoa(os.Getpid()))
	cmd.ExtraFiles = []*os.File{r} // its fd 3
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	d := &watchdog{cmd: cmd, w: w, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// arm tells the watchdog which group to kill if dlock dies.
func (d *watchdog) arm(pgid int) error {
	_, err := fmt.Fprintf(d.w, "%d\n", pgid)
	return err
}

// watchdogExitBound bounds the wait for the watchdog to exit once told to:
// it has nothing to do but read end-of-file (and perhaps kill a group).
const watchdogExitBound = 5 * time.Second

// stop ends the watchdog: disarmed first if the group is empty, so that it
// kills nothing; armed otherwise, so that it kills what is left.
func (d *watchdog) stop(groupEmpty bool) {
	if groupEmpty {
		_, _ = fmt.Fprintf(d.w, "0\n")
	}
	_ = d.w.Close()
	t := time.NewTimer(watchdogExitBound)
	defer t.Stop()
	select {
	case <-d.done:
	case <-t.C:
	}
}

// cmdWatchdog is the watchdog process: see watchdog.
func (c *cli) cmdWatchdog(args []string) int {
	if len(args) != 1 {
		return c.usageError("run", "%s is started by `dlock run`, not by hand", watchdogCommand)
	}
	// Signals meant for a terminal's jobs are not for the watchdog; it
	// writes to a terminal only in the background.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	pipe := os.NewFile(3, "dlock run's pipe")
	pgid := 0
	lines := bufio.NewScanner(pipe)
	for lines.Scan() {
		n, err := strconv.Atoi(lines.Text())
		if err != nil {
			return c.usageError("run", "%s is started by `dlock run`, not by hand", watchdogCommand)
		}
		pgid = n
	}
	// End of file, or an error (the same here): dlock is gone, or done.
	if pgid > 0 && syscall.Kill(-pgid, syscall.SIGKILL) == nil {
		fmt.Fprintf(c.stderr, "dlock: error: dlock run (pid %s) ended before PROGRAM's process group (%d): killed the group, which no longer holds the lock\n", args[0], pgid)
		return exitLeaseLost
	}
	return exitOK
}
