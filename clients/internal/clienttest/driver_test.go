package clienttest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// langs are the clients every scenario runs with.
var langs = []string{"python", "java"}

// eachClient runs test once per client language, each with a gateway of
// its own.
func eachClient(t *testing.T, test func(t *testing.T, e *env, d *driver)) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			e := newEnv(t)
			test(t, e, startDriver(t, lang, e.Srv.URL))
		})
	}
}

// driver is a client's test driver running in a child process: commands
// go to its stdin, and each reply line, which starts with the command's
// name, comes to that name's channel.
type driver struct {
	t     *testing.T
	lang  string
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu      sync.Mutex
	replies map[string]chan []string
	stderr  bytes.Buffer
	done    chan struct{}
}

// clientCommand is the command that runs lang's driver against the
// gateway at url.
func clientCommand(t *testing.T, lang string, args ...string) *exec.Cmd {
	t.Helper()
	switch lang {
	case "python":
		cmd := exec.Command(tool(t, "python3", "python3"), args...)
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // no __pycache__ in the tree
		return cmd
	case "java":
		return exec.Command(tool(t, "java", "default-jdk-headless"), append([]string{"-cp", javaClasses(t)}, args...)...)
	}
	t.Fatalf("no client %q", lang)
	return nil
}

func startDriver(t *testing.T, lang, url string) *driver {
	t.Helper()
	var cmd *exec.Cmd
	if lang == "python" {
		cmd = clientCommand(t, lang, filepath.Join(clientsDir, "python/tests/driver.py"), url)
	} else {
		cmd = clientCommand(t, lang, "Driver", url)
	}
	d := &driver{t: t, lang: lang, cmd: cmd, replies: map[string]chan []string{}, done: make(chan struct{})}
	var err error
	if d.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = lockedWriter{&d.mu, &d.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go d.read(out)
	t.Cleanup(func() {
		d.stdin.Close()
		_ = cmd.Process.Kill()
		<-d.done
		_ = cmd.Wait()
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.stderr.Len() > 0 {
			t.Logf("%s driver's stderr:\n%s", lang, d.stderr.String())
		}
	})
	return d
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (d *driver) read(out io.Reader) {
	defer close(d.done)
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 0 {
			continue
		}
		select {
		case d.ch(f[0]) <- f[1:]:
		default: // a test that stopped reading: the line is dropped
		}
	}
}

func (d *driver) ch(name string) chan []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.replies[name]
	if !ok {
		c = make(chan []string, 16)
		d.replies[name] = c
	}
	return c
}

// send sends a command line without waiting for its reply.
func (d *driver) send(format string, args ...any) {
	d.t.Helper()
	if _, err := fmt.Fprintf(d.stdin, format+"\n", args...); err != nil {
		d.t.Fatalf("%s driver: %v", d.lang, err)
	}
}

// next waits for name's next line, its words after the name.
func (d *driver) next(name string) []string {
	d.t.Helper()
	select {
	case f := <-d.ch(name):
		return f
	case <-d.done:
		select {
		case f := <-d.ch(name):
			return f
		default:
		}
		d.t.Fatalf("%s driver exited before answering %s", d.lang, name)
	case <-time.After(waitFor):
		d.t.Fatalf("%s driver: no answer for %s within %v", d.lang, name, waitFor)
	}
	return nil
}

// do sends a command, whose second word is its name, and waits for its reply.
func (d *driver) do(format string, args ...any) []string {
	d.t.Helper()
	line := fmt.Sprintf(format, args...)
	d.send("%s", line)
	return d.next(strings.Fields(line)[1])
}

// ok fails the test unless reply is ok, and returns its words after "ok".
func (d *driver) ok(reply []string) []string {
	d.t.Helper()
	if len(reply) == 0 || reply[0] != "ok" {
		d.t.Fatalf("%s driver: %q, want ok", d.lang, reply)
	}
	return reply[1:]
}

// errorClass is the class a client raises for a code: LockedError in
// Python, GatewayException.LockedException in Java.
func (d *driver) errorClass(code string) string {
	var b strings.Builder
	for _, w := range strings.Split(code, "_") {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	if d.lang == "java" {
		return b.String() + "Exception"
	}
	return b.String() + "Error"
}

// wantError fails the test unless reply is the error code, raised as the
// client's exception class for it.
func (d *driver) wantError(reply []string, code string) {
	d.t.Helper()
	if len(reply) != 3 || reply[0] != "error" || reply[1] != code || reply[2] != d.errorClass(code) {
		d.t.Fatalf("%s driver: %q, want error %s %s", d.lang, reply, code, d.errorClass(code))
	}
}

func (d *driver) signal(sig syscall.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatalf("%s driver: %v: %v", d.lang, sig, err)
	}
}
