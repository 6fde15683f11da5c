package redisdlock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Every client, lease and waiter must stop its goroutines when closed,
// released or cancelled.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // go-redis reports reconnects the tests cause on purpose
	goleak.VerifyTestMain(m)
}
