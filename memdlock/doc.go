// Package memdlock is an in-memory dlock backend, for tests of code that
// takes locks: no server, no network, every primitive of package dlock
// (locks, semaphores, read-write locks, elections, multi-key locks,
// Inspect and List) with the same fair queue and grant rule as the real
// backends (the planner of package driver/queue), and hooks that make the
// faults a test needs happen on demand.
//
//	client, h, err := memdlock.New(nil)
//	h.LoseLease("orders/42")     // the lease on orders/42 is lost now
//	h.Freeze()                   // renewals stop reaching the space
//	h.Disconnect()               // the client is cut off, as by a partition
//	h.Restart()                  // the space is emptied, as a server restart
//	h.Clock().Advance(time.Hour) // with Options.Clock: time passes at once
//
// It keeps locks within one process only: it is a fake for tests and a
// reference implementation, **never a lock between processes**.
//
// # Lock spaces
//
// Clients share keys when they share a lock space. New without a Space
// makes a space of its own, and [Handle.NewClient] adds clients to it, as
// other processes would be. A named space is shared by every client of that
// name in the process: New with Options.Space, and dlock.Open with the URL
// mem://NAME once this package is imported:
//
//	import _ "github.com/dlockdev/dlock/memdlock"
//	client, err := dlock.Open(ctx, "mem://jobs")
//
// A named space lives while a client uses it or a lease in it lives, and is
// forgotten then, so that a program that opens many names keeps nothing of
// those it stopped using. Fencing tokens come from one counter for the
// process: they increase for every key even across a space forgotten and
// opened again.
//
// # Time
//
// A space counts its leases' TTLs on the real clock, or on a fake [Clock]
// (Options.Clock) that moves only at [Clock.Advance]. On a fake clock a
// client renews as if it were alive all along, so that Advance ends only
// the leases of frozen clients ([Handle.Freeze]), of those cut off
// ([Handle.Disconnect]) and those left to expire (HoldAtLeast at
// Client.Close): the way to test a pause or a partition past the TTL
// without waiting for it. Package dlock itself runs on the real clock:
// the renewal timers, HoldAtLeast and HoldAtMost do not move with a fake
// clock.
//
// # Faults
//
// [Handle.LoseLease] and [Handle.DeleteKey] end leases at once, as a
// server that expired them or an operator who deleted a key would.
// [Handle.Freeze] stops a client's renewals, as a paused process. A client
// renews its leases of one TTL together, in one batch per renewal interval
// (driver.BatchRenewer); [Handle.RenewRequests] counts its requests.
// [Handle.Disconnect] cuts a client off until [Handle.Reconnect], as a
// network partition: its calls wait until it is back or their ctx ends
// (Lock and TryLock then fail with the ctx's error, other calls with
// dlock.ErrUnavailable), and the space stops hearing from it, so that
// its leases expire unrenewed and its waiters' entries one TTL after the
// cut, and neither holds up the clients behind for longer. A Lock still
// waiting when the client is back queues again if its entry expired.
// [Handle.Restart] empties the space, as a server restarted without
// persistence: every lease is lost, waiters queue again, and fencing
// tokens keep increasing. The conformance suite (package dlocktest) runs
// its fault scenarios on these hooks.
//
// # Revoke and lock-delay
//
// A memdlock Client revokes (dlock.Client.Revoke) and keeps lock-delays
// (dlock.WithLockDelay). A revoked lease hears of it at once: its Done
// closes without waiting for a renewal. A lock-delay counts on the
// space's clock (the fake one, if any) from the grant's end: the expiry
// deadline the space kept, or the revoke's or [Handle.LoseLease]'s
// moment; LockInfo.DelayedUntil is on that clock too.
//
// See docs/testing.md in the repository for how to test a scheduled job, a
// handler that must stop on a lost lease and a leader that must step down.
package memdlock
