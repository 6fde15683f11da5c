// Package dlockgocron runs go-co-op/gocron v2 jobs once across a fleet of
// instances with dlock: a Locker (gocron.WithDistributedLocker) that skips
// a job while another instance runs it or holds it in its minimum hold,
// and an Elector (gocron.WithDistributedElector) that lets only the leader
// of a dlock Election run the jobs.
//
//	locker := dlockgocron.NewLocker(client, "jobs/", dlock.HoldAtLeast(30*time.Second))
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//
// It is a module of its own, so that dlock does not depend on gocron.
package dlockgocron
