package faultinject_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// TestMain turns the test binary into a holder process or an etcd member
// when the harness re-executes it for one; otherwise it runs the tests,
// writes the report (DLOCK_REPORT) and checks that the harness itself left
// no goroutine behind.
func TestMain(m *testing.M) {
	if os.Getenv(faultinject.HolderEnv) != "" {
		faultinject.HolderMain()
		return
	}
	if os.Getenv(etcdMemberEnv) != "" {
		etcdMemberMain()
		return
	}
	redis.SetLogger(quietLogger{})
	code := m.Run()
	testserver.StopSharedZooKeeper()
	removeWeakBinary()
	if err := writeReport(); err != nil {
		fmt.Fprintf(os.Stderr, "report: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
