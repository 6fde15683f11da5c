package dlockcron_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/integrations/robfigcron"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	_ "github.com/dlockdev/dlock/redisdlock"
	"github.com/robfig/cron/v3"
)

// recorder is a cron.Logger that keeps what it is told.
type recorder struct {
	mu    sync.Mutex
	infos []string
	errs  []error
}

func (r *recorder) Info(msg string, kv ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.infos = append(r.infos, msg)
}

func (r *recorder) Error(err error, msg string, kv ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// TestSkipIfLocked_runsOnceInHold: the wrapped job of two instances runs
// on the first only; the second's run, after the first's job returned but
// inside its minimum hold, is skipped and logged. Without dlock.NoWait the
// second would run it after the first.
func TestSkipIfLocked_runsOnceInHold(t *testing.T) {
	url := testserver.StartRedis(t).URL()
	var runs int
	var mu sync.Mutex
	job := cron.FuncJob(func() { mu.Lock(); runs++; mu.Unlock() })
	var jobs []cron.Job
	var logs []*recorder
	for range 2 {
		c, err := dlock.Open(context.Background(), url, dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		r := &recorder{}
		logs = append(logs, r)
		jobs = append(jobs, cron.NewChain(dlockcron.SkipIfLocked(c, "jobs/close-orders", r, dlock.HoldAtLeast(time.Hour))).Then(job))
	}
	jobs[0].Run()
	jobs[1].Run()
	if runs != 1 {
		t.Fatalf("job ran %d times, want 1", runs)
	}
	if len(logs[1].infos) != 1 || len(logs[0].infos)+len(logs[0].errs)+len(logs[1].errs) != 0 {
		t.Fatalf("logs: first %+v, second %+v; want one skip on the second", logs[0], logs[1])
	}
}

// TestFunc_reportsError: Func's job logs fn's error.
func TestFunc_reportsError(t *testing.T) {
	url := testserver.StartRedis(t).URL()
	c, err := dlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	boom := errors.New("boom")
	r := &recorder{}
	dlockcron.Func(c, "jobs/fails", r, func(ctx context.Context) error {
		if _, ok := dlock.LeaseFromContext(ctx); !ok {
			t.Error("fn's context carries no lease")
		}
		return boom
	}).Run()
	if len(r.errs) != 1 || !errors.Is(r.errs[0], boom) {
		t.Fatalf("logged errors %v, want boom", r.errs)
	}
}
