package leakcheck

import (
	"strings"
	"testing"
)

func TestFind_reportsALeftGoroutineAndIgnoresIt(t *testing.T) {
	stop, started := make(chan struct{}), make(chan struct{})
	go leaky(started, stop)
	<-started // so that its stack shows it waiting in leaky
	err := findNow()
	if err == nil || !strings.Contains(err.Error(), "leakcheck.leaky") {
		t.Fatalf("Find = %v, want a report naming leakcheck.leaky", err)
	}
	if err := findNow("github.com/dlockdev/dlock/internal/testing/leakcheck.leaky"); err != nil {
		t.Fatalf("Find with leaky ignored = %v, want nil", err)
	}
	close(stop)
	if err := Find(); err != nil {
		t.Fatalf("Find after the goroutine exited = %v", err)
	}
}

func leaky(started, stop chan struct{}) {
	close(started)
	<-stop
}

// findNow is Find without the wait.
func findNow(ignore ...string) error {
	if leaked := others(append(ignore, standard...)); len(leaked) > 0 {
		return &leakErr{strings.Join(leaked, "\n\n")}
	}
	return nil
}

type leakErr struct{ s string }

func (e *leakErr) Error() string { return e.s }
