package main

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// dlock status --watch on a terminal: each state replaces the screen (ANSI
// home and clear before it), and Ctrl-C ends the watch with status 0.
func TestStatusWatch_terminalRedraws(t *testing.T) {
	b := startBackend(t, "etcd")
	sh := startShell(t, b.url)
	sh.send(t, "dlock status --watch tty-watch\n")
	sh.expect(t, `\x1b\[H\x1b\[2Jtty-watch: free `)

	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	c, err := dlock.Open(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "tty-watch", dlock.WithTTL(20*time.Second), dlock.WithMetadata(dlock.Metadata{Note: "other"}))
	if err != nil {
		t.Fatal(err)
	}
	sh.expect(t, `\x1b\[H\x1b\[2Jtty-watch \(lock\): held by .*, nobody waiting\r?\n(.*\n)*holder .* other`)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	sh.expect(t, `\x1b\[H\x1b\[2Jtty-watch: free `)

	sh.send(t, "\x03")
	sh.expectPrompt(t)
	sh.send(t, "echo status:$?\n")
	sh.expect(t, `(?m)^status:0\r?$`)
	sh.send(t, "exit\n")
	if err := sh.cmd.Wait(); err != nil {
		t.Fatalf("shell: %v\n%s", err, sh.output())
	}
}
