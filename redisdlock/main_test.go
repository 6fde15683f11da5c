package redisdlock_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/dlockdev/dlock/internal/testing/leakcheck"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/redis/go-redis/v9"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// exampleAddr and exampleURL point the examples at the redis-server that
// TestMain starts.
var exampleAddr, exampleURL string

// TestMain starts the examples' server (after running the role of a child
// process started by testproc.Start, in a child); afterwards, every client, lease and
// waiter must have stopped its goroutines.
func TestMain(m *testing.M) {
	testproc.RunChild(childRoles)  // in a child process of a test: run its role, exit
	redis.SetLogger(quietLogger{}) // go-redis reports reconnects the tests cause on purpose
	addr, stop, err := testserver.StartRedisForMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisdlock tests:", err)
		os.Exit(1)
	}
	exampleAddr, exampleURL = addr, "redis://"+addr+"/0"
	code := m.Run()
	stop()
	leakcheck.Exit(code)
}
