package testproc_test

import (
	"context"
	"os"
	"testing"

	"github.com/dlockdev/dlock/internal/testing/testproc"
)

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]testproc.Role{"echo": echo})
}

// echo says its variable, waits for "go", then says "pid" and its pid.
func echo(ctx context.Context, p *testproc.Peer) error {
	p.Say("noise")
	p.Say("word %s", p.Env("WORD"))
	if err := p.Await("go"); err != nil {
		return err
	}
	p.Say("pid %d", os.Getpid())
	return nil
}

// TestChild_talksFreezesAndThaws: lines both ways, other lines skipped, a
// frozen child still answers after Thaw, and Wait sees status 0.
func TestChild_talksFreezesAndThaws(t *testing.T) {
	c := testproc.Start(t, "echo", "WORD=fence")
	if got := c.Expect(t, "word"); got != "fence" {
		t.Fatalf("word = %q, want fence", got)
	}
	c.Freeze(t)
	c.Tell(t, "go") // read once it runs again
	c.Thaw(t)
	if got := c.Expect(t, "pid"); got == "" {
		t.Fatal("no pid")
	}
	c.Wait(t)
}
