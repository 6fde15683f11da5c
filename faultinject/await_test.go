package faultinject_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
)

// fakeHolder starts a holder that says it is ready, reads one command,
// writes the reply to it (the harness numbers its first command 1) and
// exits at once: what a real holder does on close. notice, if not empty, is
// a notice it writes just before the reply.
func fakeHolder(t *testing.T, notice string, hold func(*proc, faultinject.Event)) *proc {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	script := `printf '%s\n' '{"ev":"ready","name":"fake"}'
read -r line
if [ -n "$NOTICE" ]; then printf '%s\n' "$NOTICE"; fi
printf '%s\n' '{"id":1,"ev":"close","name":"fake"}'
exit 0`
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = []string{"NOTICE=" + notice}
	return launch(t, "fake", cmd, hold)
}

// holdUntilReaped holds back every event but ready until the harness has
// waited for the process: the schedule of a loaded machine, where the
// reader goroutine runs only after the exit has been noticed.
func holdUntilReaped(p *proc, ev faultinject.Event) {
	if ev.Ev != "ready" {
		<-p.reaped
	}
}

// A reply that a holder writes just before it exits must be returned by
// await, never reported as "exited while …", however the reader and the
// exit are scheduled. Wait closes the stdout pipe (cmd.StdoutPipe) with the
// reply possibly unread in it, so a harness that closed exited as soon as
// Wait returned would let await's select take the exit first: on a busy
// machine a scenario would then fail with "holder A exited while close".
// With the reader held until the process has been reaped, such a harness
// fails this test in every run, by construction; unheld, the outcome
// depends on scheduling (sh exits before the reader has read).
func TestAwaitReplyBeforeExit(t *testing.T) {
	t.Run("reader held until reaped", func(t *testing.T) {
		for range 5 {
			p := fakeHolder(t, "", holdUntilReaped)
			if ev := p.call(faultinject.Command{Op: "close"}, time.Minute); ev.Ev != "close" {
				t.Fatalf("reply %+v, want the close reply", ev)
			}
		}
	})
	t.Run("unheld", func(t *testing.T) {
		for range 50 {
			p := fakeHolder(t, "", nil)
			if ev := p.call(faultinject.Command{Op: "close"}, time.Minute); ev.Ev != "close" {
				t.Fatalf("reply %+v, want the close reply", ev)
			}
		}
	})
}

// A notice written just before the holder exits is found by notice, for the
// same reason: notice must not answer "not found" when the exit wins.
func TestNoticeBeforeExit(t *testing.T) {
	for range 5 {
		p := fakeHolder(t, `{"ev":"done","name":"fake","at":1}`, holdUntilReaped)
		from := p.mark()
		p.send(faultinject.Command{Op: "close"})
		if _, ok := p.awaitDone(from, time.Minute, "the done notice"); !ok {
			t.Fatalf("the done notice written before the exit was not found")
		}
	}
}
