package promtest_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/dlockdev/dlock/internal/testing/leakcheck"
	"github.com/redis/go-redis/v9"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// TestMain checks that no client, lease or waiter was left running.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // go-redis reports the reconnects of a flushed server
	code := m.Run()
	if code == 0 {
		if err := leakcheck.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
