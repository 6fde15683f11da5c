package etcddlock_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/dlockdev/dlock/internal/testserver"
	"go.uber.org/goleak"
)

// Every client, lease and waiter must stop its goroutines when closed,
// released or cancelled. The shared embedded etcd is stopped first: its
// own goroutines are not ours to check.
func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopSharedEtcd()
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func leakOptions() []goleak.Option {
	return []goleak.Option{
		// Started once per process by libraries etcd links in.
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
	}
}
