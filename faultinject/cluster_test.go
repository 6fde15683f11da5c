package faultinject_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// startOnFreePorts returns what try starts, trying again on new ports up
// to three times in all: a port found free can be taken before the server
// binds it (by the local end of some connection of a test running
// alongside). what names the servers in the test log.
func startOnFreePorts[S any](t *testing.T, what string, try func() (S, error)) S {
	t.Helper()
	testserver.SkipIfShort(t)
	for attempt := 1; ; attempt++ {
		s, err := try()
		if err == nil {
			return s
		}
		if attempt == 3 {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s, attempt %d: %v; again on new ports", what, attempt, err)
	}
}

// awaitServers calls ready every 50 ms until it returns nil, and returns
// its last error after timeout. It polls: the servers offer nothing to wait
// on. It gives up early when one of procs (nil: not running) exits, a port
// taken, say; name(i) names server i then.
func awaitServers(procs []*testserver.Process, name func(i int) string, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		for i, p := range procs {
			if p == nil {
				continue
			}
			select {
			case <-p.Exited():
				return fmt.Errorf("%s exited", name(i))
			default:
			}
		}
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %v", err, timeout)
		}
		time.Sleep(50 * time.Millisecond) // polling the servers
	}
}
