package main

// Exit statuses of dlock's own failures. `dlock run` otherwise exits with
// the status of PROGRAM (128+N when a signal N ended it), so these codes
// avoid the ones programs commonly use: 64–78 come from BSD's sysexits.h,
// 124 from timeout(1), 126 and 127 from the shell. docs/cli.md lists them;
// keep the two in step.
const (
	exitOK = 0
	// exitFailure: any other dlock failure (for example the backend
	// cannot inspect locks, or an unexpected server error).
	exitFailure = 1
	// exitUsage: bad flags, arguments, key, TTL or environment variable.
	exitUsage = 64 // EX_USAGE
	// exitUnavailable: the backend cannot be reached, or stopped answering.
	exitUnavailable = 69 // EX_UNAVAILABLE
	// exitLocked: --no-wait and the key is held, or others queue for it.
	exitLocked = 75 // EX_TEMPFAIL: try again later
	// exitConfig: the backend URL is malformed or names an unknown scheme,
	// or the server refused the credentials.
	exitConfig = 78 // EX_CONFIG
	// exitLeaseLost: the lease ended while PROGRAM ran; dlock stopped
	// PROGRAM, whose own status is then not reported.
	exitLeaseLost = 79
	// exitKindMismatch: the key's holders and waiters use it as another
	// kind (a lock, a semaphore of another limit, a read-write lock) than
	// --limit, --shared and --exclusive ask for. Nothing changed on the
	// server; PROGRAM was not started.
	exitKindMismatch = 80
	// exitHoldLimit: --hold-at-most passed while PROGRAM ran: dlock
	// released the lock and stopped PROGRAM as on a lost lease; PROGRAM's
	// own status is then not reported. (81 is dlock leader's.)
	exitHoldLimit = 82
	// exitTimeout: --wait passed before the lock was granted.
	exitTimeout = 124 // as timeout(1)
	// exitCannotExec: PROGRAM was found but could not be started.
	exitCannotExec = 126 // as the shell
	// exitNotFound: PROGRAM was not found.
	exitNotFound = 127 // as the shell
	// exitSignal + N: dlock itself was stopped by signal N while it waited
	// for the lock (PROGRAM never ran); also what PROGRAM's death by
	// signal N is reported as.
	exitSignal = 128
)

// Exit statuses of dlock leader and dlock elect; the table above applies to
// them too.
const (
	// exitNoLeader: dlock leader found nobody leading the election.
	exitNoLeader = 81
)
