// Package dlockcron runs robfig/cron v3 jobs once across a fleet of
// instances with dlock: SkipIfLocked is a cron.JobWrapper that runs the job
// under a dlock key with dlock.NoWait, so that the instances that fire
// while another one runs it (or holds it in its minimum hold, with
// dlock.HoldAtLeast) skip it.
//
//	job := cron.NewChain(dlockcron.SkipIfLocked(client, "jobs/close-orders", logger,
//		dlock.HoldAtLeast(30*time.Second))).Then(cron.FuncJob(closeOrders))
//	c.Schedule(schedule, job)
//
// It is a module of its own, so that dlock does not depend on cron.
package dlockcron

import (
	"context"
	"errors"

	"github.com/dlockdev/dlock"
	"github.com/robfig/cron/v3"
)

// SkipIfLocked returns a cron.JobWrapper that runs the wrapped job inside
// client.Do on key with opts and dlock.NoWait. A run that finds the key
// held is skipped and logged with logger.Info; other errors (the server
// unreachable, the lease lost while the job ran) with logger.Error. A nil
// logger logs nothing.
//
// Each job needs its own key: wrap jobs one by one (cron.NewChain(…).Then),
// not the whole Cron with cron.WithChain.
//
// cron.Job has no context: a job that must stop when the lease is lost
// should use Func, whose function gets Do's context.
func SkipIfLocked(client *dlock.Client, key string, logger cron.Logger, opts ...dlock.LockOption) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return Func(client, key, logger, func(context.Context) error { j.Run(); return nil }, opts...)
	}
}

// Func returns a cron.Job that runs fn inside client.Do on key with opts and
// dlock.NoWait, as SkipIfLocked does, and logs fn's error too. fn's
// context is cancelled when the lease is lost; dlock.LeaseFromContext gives
// its fencing token.
func Func(client *dlock.Client, key string, logger cron.Logger, fn func(ctx context.Context) error, opts ...dlock.LockOption) cron.Job {
	if logger == nil {
		logger = cron.DiscardLogger
	}
	opts = append(append([]dlock.LockOption(nil), opts...), dlock.NoWait())
	return cron.FuncJob(func() {
		err := client.Do(context.Background(), key, fn, opts...)
		switch {
		case err == nil:
		case errors.Is(err, dlock.ErrLocked):
			logger.Info("skipped: another instance runs it or ran it within its minimum hold", "key", key)
		default:
			logger.Error(err, "job failed", "key", key)
		}
	})
}
