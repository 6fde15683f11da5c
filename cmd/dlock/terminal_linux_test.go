package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// dlock run in an interactive shell's terminal: PROGRAM runs in a process
// group of its own, which must not cost it the terminal. In a background
// process group, reading the terminal stops a process (SIGTTIN), and Ctrl-C
// and Ctrl-Z do not reach it: dlock hands PROGRAM's group the terminal, as
// a shell hands it to a job, and follows its stops, so that Ctrl-Z stops
// the whole job and `fg` resumes it.
func TestRun_terminal(t *testing.T) {
	b := startBackend(t, "etcd")
	sh := startShell(t, b.url)

	// PROGRAM reads a line typed at the terminal.
	sh.send(t, "dlock run tty-read -- sh -c 'echo ready; read line; echo got:$line'\n")
	sh.expect(t, `(?m)^ready\r?$`)
	sh.send(t, "hello\n")
	sh.expect(t, `(?m)^got:hello\r?$`)
	sh.send(t, "echo status:$?\n")
	sh.expect(t, `(?m)^status:0\r?$`)

	// Ctrl-C reaches PROGRAM from the terminal.
	sh.send(t, "dlock run tty-int -- sh -c 'echo ready; read line'\n")
	sh.expect(t, `(?m)^ready\r?$`)
	sh.send(t, "\x03")
	sh.expectPrompt(t) // the terminal drops typed input at Ctrl-C: wait
	sh.send(t, "echo status:$?\n")
	sh.expect(t, `(?m)^status:130\r?$`)

	// Ctrl-Z stops the job, as the shell sees it; fg resumes PROGRAM,
	// which has the terminal again.
	sh.send(t, "dlock run tty-stop -- sh -c 'echo ready; read line; echo got:$line'\n")
	sh.expect(t, `(?m)^ready\r?$`)
	sh.send(t, "\x1a")
	sh.expect(t, `Stopped +dlock run tty-stop`)
	sh.expectPrompt(t)
	sh.send(t, "fg\n")
	sh.expect(t, `(?m)^dlock run tty-stop .*\r?\n`)
	sh.send(t, "again\n")
	sh.expect(t, `(?m)^got:again\r?$`)
	sh.send(t, "echo status:$?\n")
	sh.expect(t, `(?m)^status:0\r?$`)

	sh.send(t, "exit\n")
	if err := sh.cmd.Wait(); err != nil {
		t.Fatalf("shell: %v\n%s", err, sh.output())
	}
}

// shell is an interactive bash on a pseudo-terminal of its own, in a
// session of its own, with job control.
type shell struct {
	cmd    *exec.Cmd
	master *os.File

	mu   sync.Mutex
	out  bytes.Buffer // everything the terminal showed; guarded by mu
	seen int          // how much of out expect has matched; guarded by mu
}

func startShell(t *testing.T, backendURL string) *shell {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash not found: %v (apt-get install -y bash)", err)
	}
	master, slave := openPTY(t)
	cmd := exec.Command(bash, "--norc", "--noprofile", "-i")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TERM=dumb", "PS1=$ ", "DLOCK_BACKEND=" + backendURL}
	cmd.Dir = t.TempDir()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	sh := &shell{cmd: cmd, master: master}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			sh.mu.Lock()
			sh.out.Write(buf[:n])
			sh.mu.Unlock()
			if err != nil {
				return // EIO once the shell and its jobs have gone
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		master.Close()
		<-done
	})
	return sh
}

func (sh *shell) send(t *testing.T, s string) {
	t.Helper()
	if _, err := sh.master.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// expect waits until the terminal shows a match of re after the previous
// match.
func (sh *shell) expect(t *testing.T, re string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	ok := waitUntil(waitBound, func() bool {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		loc := rx.FindIndex(sh.out.Bytes()[sh.seen:])
		if loc != nil {
			sh.seen += loc[1]
		}
		return loc != nil
	})
	if !ok {
		t.Fatalf("after %v, the terminal shows no %q after what was matched; it shows:\n%s", waitBound, re, sh.output())
	}
}

// expectPrompt waits for the shell's prompt, with nothing after it.
func (sh *shell) expectPrompt(t *testing.T) {
	t.Helper()
	sh.expect(t, `\$ $`)
}

func (sh *shell) output() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.out.String()
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals: %v", err)
	}
	// Through SyscallConn, not Fd, which would make reads blocking:
	// Close could then not interrupt the reader.
	rc, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	cerr := rc.Control(func(fd uintptr) {
		if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
			n, err = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	})
	if err != nil || cerr != nil {
		t.Fatalf("pseudo-terminal: %v %v", err, cerr)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, slave
}
