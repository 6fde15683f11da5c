package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dlockdev/dlock"
)

// forwardedSignals are passed on to PROGRAM. While dlock still waits for
// the lock, any of them makes it give up and exit with 128+N, as their
// default action would.
func forwardedSignals() []os.Signal {
	return []os.Signal{
		syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2,
	}
}

// releaseTimeout bounds the release after PROGRAM exits. If the server does
// not answer by then, it frees the key itself when the TTL runs out.
const releaseTimeout = 5 * time.Second

func (c *cli) cmdRun(ctx context.Context, args []string) int {
	f := newFlags("run")
	backend := addBackendFlags(f)
	ttl := f.Duration("ttl", dlock.DefaultTTL, "")
	wait := f.Duration("wait", 0, "")
	noWait := f.Bool("no-wait", false, "")
	f.BoolVar(noWait, "n", false, "") // flock's -n
	conflictCode := f.Int("conflict-exit-code", exitLocked, "")
	f.IntVar(conflictCode, "E", exitLocked, "") // flock's -E
	grace := f.Duration("grace", 0, "")
	holdAtLeast := f.Duration("hold-at-least", 0, "")
	holdAtMost := f.Duration("hold-at-most", 0, "")
	lockDelay := f.Duration("lock-delay", 0, "")
	verbose := f.Bool("verbose", false, "")
	f.BoolVar(verbose, "v", false, "")
	limit := f.Int("limit", 0, "")
	shared := f.Bool("shared", false, "")
	exclusive := f.Bool("exclusive", false, "")
	metricsAddr := addMetricsFlag(f)
	pos, code, ok := c.parse(f, args, -1)
	if !ok {
		return code
	}
	key, program, code, ok := c.keyAndProgram("run", pos, "under the lock")
	if !ok {
		return code
	}

	// Without --ttl, the backend's default applies: dlock.DefaultTTL, or
	// the fixed lease length of a backend that has one (ZooKeeper's
	// session timeout), which refuses any other.
	ttlSet, code, ok := c.checkTTL("run", f, *ttl)
	if !ok {
		return code
	}
	waitSet, noWaitSet := f.isSet("wait"), f.isSet("no-wait") && *noWait
	if waitSet && noWaitSet {
		// The command line beats the environment; two of a kind conflict.
		switch drop, err := f.commandLineWins("wait", "no-wait"); {
		case err != nil:
			return c.usageError("run", "%v", err)
		case drop == "wait":
			*wait, waitSet = 0, false
		default:
			*noWait, noWaitSet = false, false
		}
	}
	if waitSet && *wait <= 0 {
		return c.usageError("run", "%s %v: must be positive; use --no-wait to give up at once, or leave it out to wait as long as it takes", f.source("wait"), *wait)
	}
	// --grace is checked against the lease's real TTL once the lock is
	// taken, below; a contradiction visible now fails now.
	graceSet, code, ok := c.checkGrace("run", f, *grace, *ttl, ttlSet)
	if !ok {
		return code
	}
	shape, code, ok := c.parseShape(f, limit, shared, exclusive)
	if !ok {
		return code
	}
	if *holdAtLeast < 0 || *holdAtLeast > dlock.MaxTTL {
		return c.usageError("run", "%s %v: the minimum hold must lie within [0, %v]", f.source("hold-at-least"), *holdAtLeast, dlock.MaxTTL)
	}
	if *holdAtMost < 0 || (*holdAtMost > 0 && *holdAtMost < dlock.MinTTL) {
		return c.usageError("run", "%s %v: the maximum hold must be 0 (none) or at least %v", f.source("hold-at-most"), *holdAtMost, dlock.MinTTL)
	}
	if *lockDelay < 0 || *lockDelay > dlock.MaxLockDelay {
		return c.usageError("run", "%s %v: the lock-delay must lie within [0, %v]", f.source("lock-delay"), *lockDelay, dlock.MaxLockDelay)
	}
	if *holdAtMost > 0 && *holdAtMost < *holdAtLeast {
		return c.usageError("run", "%s %v is shorter than %s %v: the lock is released at the maximum hold", f.source("hold-at-most"), *holdAtMost, f.source("hold-at-least"), *holdAtLeast)
	}
	// A quiet skip (-E) is what --no-wait's conflict is for: given alone,
	// it would be a waiting run that never skips.
	quietSkip := f.isSet("conflict-exit-code")
	if quietSkip && !*noWait {
		return c.usageError("run", "%s applies only with --no-wait (-n): dlock run -n -E 0 KEY -- PROGRAM is cron's quiet skip", f.source("conflict-exit-code"))
	}
	if *conflictCode < 0 || *conflictCode > 255 {
		return c.usageError("run", "%s %d: an exit status lies within [0, 255]", f.source("conflict-exit-code"), *conflictCode)
	}

	metrics, stopMetrics, code, ok := c.startClientMetrics(f, *metricsAddr, *verbose)
	if !ok {
		return code
	}
	defer stopMetrics()

	// Signals are caught from the start: an interrupted wait must leave the
	// queue, not die in it. Until PROGRAM runs, the first one cancels ctx.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals()...)
	defer signal.Stop(sigs)
	ctx, stopWatch := cancelOnSignal(ctx, sigs)

	client, code, ok := c.open(ctx, backend, withMetrics(programOptions(program, *ttl, ttlSet), metrics)...)
	if !ok {
		if s := stopWatch(); s != nil {
			return c.interrupted(s, key)
		}
		return code
	}
	defer client.Close()

	skip := conflictExit{code: *conflictCode, quiet: quietSkip}
	holds := []dlock.LockOption{dlock.HoldAtLeast(*holdAtLeast), dlock.HoldAtMost(*holdAtMost)}
	if *lockDelay > 0 {
		// Only when asked: a backend that cannot keep one refuses it.
		holds = append(holds, dlock.WithLockDelay(*lockDelay))
	}
	lease, code, ok := c.acquire(ctx, client, key, shape, *wait, *noWait, skip, holds, *backend.url, *verbose)
	if s := stopWatch(); s != nil {
		// A signal came: do not start PROGRAM even if the lock was granted.
		if lease != nil {
			uctx, ucancel := context.WithTimeout(context.Background(), releaseTimeout)
			_ = lease.Unlock(uctx)
			ucancel()
		}
		return c.interrupted(s, key)
	}
	if !ok {
		return code
	}
	if !graceSet {
		*grace = defaultGrace(lease.TTL())
	}
	if *grace >= lease.TTL() {
		uctx, ucancel := context.WithTimeout(context.Background(), releaseTimeout)
		_ = lease.Unlock(uctx)
		ucancel()
		return c.fail(exitUsage, fmt.Errorf("%s %v: must be shorter than the lease's TTL, %v; PROGRAM was not started", f.source("grace"), *grace, lease.TTL()),
			graceHint(*backend.url, ttlSet))
	}
	if *verbose {
		fmt.Fprintf(c.stderr, "dlock: acquired %s (token %d, TTL %v)\n", shape.acquired(key), lease.Token(), lease.TTL())
	}
	return c.supervise(lease, shape, program, sigs, *grace, *holdAtMost, *verbose)
}

// graceHint says how to fix a --grace that is not shorter than the TTL.
func graceHint(backendURL string, ttlSet bool) string {
	if strings.HasPrefix(backendURL, "zk:") {
		return "on ZooKeeper the TTL is the session timeout: raise it with ?session_timeout= in the backend URL, or lower --grace"
	}
	if !ttlSet {
		return "lower --grace, or raise the TTL with --ttl"
	}
	return "lower --grace, or raise --ttl"
}

// cancelOnSignal returns a context cancelled by the first signal from sigs,
// and a function that stops watching and returns that signal, or nil.
func cancelOnSignal(ctx context.Context, sigs <-chan os.Signal) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	caught := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigs:
			caught <- s
			cancel()
		case <-stop:
			caught <- nil
		}
	}()
	var once sync.Once
	var s os.Signal
	return ctx, func() os.Signal {
		once.Do(func() {
			close(stop)
			s = <-caught
			cancel()
		})
		return s
	}
}

// interrupted reports a signal that came before PROGRAM started, and
// returns 128+N as its default action would.
func (c *cli) interrupted(s os.Signal, key string) int {
	fmt.Fprintf(c.stderr, "dlock: %s while waiting for %q; PROGRAM was not started\n", signalName(s), key)
	return exitSignal + signalNumber(s)
}

// defaultGrace is how long PROGRAM may take to stop after SIGTERM once the
// lease is lost: a third of the TTL, at most 5 seconds. During the grace
// period another holder may already run, so it should stay short; it is
// shorter than the TTL so that a PROGRAM that ignores SIGTERM cannot go on
// for a whole lease after losing it.
func defaultGrace(ttl time.Duration) time.Duration {
	return min(ttl/3, 5*time.Second)
}

// acquire takes the lock. On failure it reports the error (unless ctx was
// cancelled) and returns ok=false with the exit status.
func (c *cli) acquire(ctx context.Context, client *dlock.Client, key string, shape runShape, wait time.Duration, noWait bool, skip conflictExit, holds []dlock.LockOption, backendURL string, verbose bool) (*dlock.Lease, int, bool) {
	lctx := ctx
	if wait > 0 {
		var cancelWait context.CancelFunc
		lctx, cancelWait = context.WithTimeout(ctx, wait)
		defer cancelWait()
	}
	if !noWait && verbose {
		if who := c.describeHolder(client, key); who != "" {
			fmt.Fprintf(c.stderr, "dlock: waiting for %q, %s\n", key, who)
		}
	}
	lease, err := shape.acquire(lctx, client, key, noWait, holds...)
	switch {
	case err == nil:
		return lease, exitOK, true
	case ctx.Err() != nil:
		return nil, exitFailure, false // interrupted: the caller reports it
	case errors.Is(err, dlock.ErrKindMismatch):
		// The driver refuses it at once, waiting or not, and wrote
		// nothing: say what the key is and which flags take it.
		return nil, c.fail(exitKindMismatch, err, c.kindHint(client, key, shape)), false
	case errors.Is(err, dlock.ErrLocked) && skip.quiet:
		// -E: skipping is the expected outcome (cron on every host),
		// not an error; --verbose still says it.
		if verbose {
			who := c.describeHolder(client, key)
			if who == "" {
				who = "it is held by another client"
			}
			fmt.Fprintf(c.stderr, "dlock: skipped: %s: %s; exiting %d (--conflict-exit-code)\n", lockedText(key, shape), who, skip.code)
		}
		return nil, skip.code, false
	case errors.Is(err, dlock.ErrLocked):
		who := c.describeHolder(client, key)
		if who == "" {
			who = "it is held by another client"
		}
		return nil, c.fail(skip.code, fmt.Errorf("%s: %s", lockedText(key, shape), who),
			"to wait for it, leave out --no-wait (add --wait 30s to give up after 30 seconds); `dlock status "+key+"` shows who holds it"), false
	case wait > 0 && errors.Is(err, context.DeadlineExceeded):
		who := c.describeHolder(client, key)
		if who != "" {
			who = "; " + who
		}
		return nil, c.fail(exitTimeout, fmt.Errorf("gave up waiting for %q after %v (--wait)%s", key, wait, who),
			"`dlock status "+key+"` shows who holds it and who waits"), false
	}
	code, hints := c.explain(err, backendURL)
	return nil, c.fail(code, err, hints...), false
}

// conflictExit is what --no-wait does when the key is not free: exit with
// code (--conflict-exit-code, 75 by default), and, when quiet (-E given),
// without an error.
type conflictExit struct {
	code  int
	quiet bool
}

// killWait bounds the wait for PROGRAM's process group to be gone after
// SIGKILL, which the kernel delivers at once but which a process blocked
// in the kernel (a hung NFS write) obeys only when it returns. By then it
// can run no more of its own code: dlock releases the lock and exits.
const killWait = 5 * time.Second

// drainPoll is how often dlock looks whether the processes PROGRAM left in
// its group are gone: nothing signals it, as they are not all dlock's
// children.
const drainPoll = 10 * time.Millisecond

// supervise runs PROGRAM under the lease and returns dlock's exit status.
//
// PROGRAM runs as the leader of a process group of its own, and dlock acts
// on the whole group: it forwards signals to it; when the lease is lost it
// sends it SIGTERM, then SIGKILL after the grace period; when PROGRAM exits
// and processes it started are still in the group, they get the same
// treatment, since they must not run on without the lock. dlock releases
// the lock, and exits, only once the group is empty (or killWait after
// SIGKILL). A watchdog process kills the group if dlock itself is killed.
func (c *cli) supervise(lease *dlock.Lease, shape runShape, program []string, sigs chan os.Signal, grace, holdAtMost time.Duration, verbose bool) int {
	defer func() {
		timeout := releaseTimeout
		if lease.Err() != nil {
			// Lost: the server drops the grant within a TTL anyway, and
			// the server may well be what is unreachable.
			timeout = min(timeout, lease.TTL())
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := lease.Unlock(ctx)
		if err == nil && lease.Err() == nil {
			// --hold-at-least: PROGRAM was quicker than the minimum
			// hold. The Client renews the lease and releases it when
			// the hold ends; until then dlock waits, idle.
			c.waitHold(lease, sigs, verbose)
			return
		}
		switch {
		case err == nil:
			if verbose {
				fmt.Fprintf(c.stderr, "dlock: released %q\n", lease.Key())
			}
		case errors.Is(err, dlock.ErrNotHeld):
			// Reported below: the lease was lost.
		default:
			c.warnf("could not confirm the release of %q (%v); the server frees it when its TTL (%v) runs out", lease.Key(), err, lease.TTL())
		}
	}()

	cmd := exec.Command(program[0], program[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	cmd.Env = append(os.Environ(),
		envKey+"="+lease.Key(),
		envToken+"="+strconv.FormatUint(lease.Token(), 10),
		envMode+"="+shape.childMode())
	// When stdout or stderr is not a file, Wait also waits for everybody
	// holding the pipe os/exec copies from, leftovers of PROGRAM's group
	// included; dlock learns that PROGRAM exited, and stops them, only
	// when Wait returns.
	cmd.WaitDelay = grace

	becomeSubreaper()
	dog, err := startWatchdog(c.stderr)
	if err != nil {
		c.warnf("cannot start the watchdog (%v): if dlock is killed, what PROGRAM started runs on without the lock", err)
	}
	g, err := startGroup(cmd, c.stdin, dog)
	if err != nil {
		if dog != nil {
			dog.stop(true)
		}
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return c.fail(code, fmt.Errorf("cannot run %s: %w", program[0], err), "PROGRAM runs without a shell; to use shell syntax, run sh -c '…'")
	}
	defer g.finish()
	stops, stopFollowing := followStops(g.pgid)
	defer stopFollowing()

	lost := lease.Done()
	exited := g.exited
	var (
		lostErr   error
		status    int
		ending    bool             // a signal that ends programs was forwarded to the group
		terminate bool             // SIGTERM sent to the group
		kill      <-chan time.Time // the grace period after SIGTERM
		killed    <-chan time.Time // killWait after SIGKILL
		drain     <-chan time.Time // polls the group once PROGRAM has exited
	)
	stop := func() {
		if terminate {
			return
		}
		terminate = true
		g.signal(syscall.SIGTERM)
		g.signal(syscall.SIGCONT) // a stopped process acts on SIGTERM only once continued
		kill = time.After(grace)
	}
	for {
		select {
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok {
				g.signal(sig)
				if sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2 {
					// A signal that ends programs: a stopped one
					// (Ctrl-Z) acts on it only once continued, as a
					// shell's kill does for a stopped job. Else a
					// SIGHUP from a closed terminal would leave it,
					// and dlock with the lock, waiting for ever.
					g.signal(syscall.SIGCONT)
					ending = true
				}
			}
		case sig := <-stops:
			g.suspend(sig)
		case <-lost:
			lost = nil
			lostErr = lease.Err()
			if errors.Is(lostErr, dlock.ErrHoldLimit) {
				// --hold-at-most: PROGRAM hangs, or is slower than
				// its limit; the lock is released already.
				c.fail(exitHoldLimit, fmt.Errorf("released %s at its maximum hold of %v (--hold-at-most) while %s still ran", shape.lease(), fmtDuration(holdAtMost), program[0]),
					"another run may take "+shape.lease()+" now; raise --hold-at-most if "+program[0]+" needs longer")
			} else {
				c.fail(exitLeaseLost, fmt.Errorf("lost %s: %w", shape.lease(), lostErr),
					"another holder may get "+shape.lease()+" now; protect shared resources with $DLOCK_TOKEN as a fencing token")
			}
			if exited != nil {
				fmt.Fprintf(c.stderr, "dlock: stopping %s (pid %d) and its process group: SIGTERM now, SIGKILL in %v if it is still running\n", program[0], g.pgid, fmtDuration(grace))
			} else if !terminate {
				fmt.Fprintf(c.stderr, "dlock: stopping what %s left running in its process group: SIGTERM now, SIGKILL in %v\n", program[0], fmtDuration(grace))
			}
			stop()
		case <-kill:
			kill = nil
			fmt.Fprintf(c.stderr, "dlock: %s's process group did not stop within %v after SIGTERM; sending SIGKILL\n", program[0], fmtDuration(grace))
			g.signal(syscall.SIGKILL)
			killed = time.After(killWait)
		case <-exited:
			exited = nil
			g.markReaped()
			status = exitStatus(cmd.ProcessState)
			if g.empty() {
				return c.runResult(lease, shape, program[0], status, lostErr)
			}
			switch {
			case ending && !terminate:
				// They got the signal that ended PROGRAM, and may
				// still be acting on it: give them the grace period.
				terminate = true
				kill = time.After(grace)
			case !terminate:
				c.warnf("%s exited (status %d) but left processes running in its process group; stopping them: SIGTERM now, SIGKILL in %v", program[0], status, fmtDuration(grace))
				stop()
			}
			t := time.NewTicker(drainPoll)
			defer t.Stop()
			drain = t.C
		case <-drain:
			if g.empty() {
				return c.runResult(lease, shape, program[0], status, lostErr)
			}
		case <-killed:
			killed = nil
			if exited == nil {
				c.warnf("processes of %s's process group are still there %v after SIGKILL; releasing the lock anyway", program[0], killWait)
				return c.runResult(lease, shape, program[0], status, lostErr)
			}
			// PROGRAM itself has not exited yet: its status comes when
			// it does.
		}
	}
}

// runResult is the exit status of dlock run once PROGRAM's group is gone.
func (c *cli) runResult(lease *dlock.Lease, shape runShape, name string, status int, lostErr error) int {
	switch {
	case errors.Is(lostErr, dlock.ErrHoldLimit):
		return exitHoldLimit
	case lostErr != nil:
		return exitLeaseLost
	}
	if err := lease.Err(); errors.Is(err, dlock.ErrHoldLimit) {
		// The limit came as PROGRAM exited, before we looked.
		c.fail(exitHoldLimit, fmt.Errorf("released %s at its maximum hold (--hold-at-most) before %s exited (with status %d)", shape.lease(), name, status),
			"raise --hold-at-most if "+name+" needs longer")
		return exitHoldLimit
	} else if err != nil {
		// Lost after PROGRAM's last instructions but before we looked:
		// its work may have overlapped another holder's.
		c.fail(exitLeaseLost, fmt.Errorf("lost %s before %s exited (with status %d): %w", shape.lease(), name, status, err),
			"another holder may have run at the same time; protect shared resources with $DLOCK_TOKEN as a fencing token")
		return exitLeaseLost
	}
	return status
}

// exitStatus is the status a shell would report for a finished process.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return ps.ExitCode()
}

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	}
	return s.String()
}

// commandNote is PROGRAM's command line as a shell would need it, cut to
// fit in the lock's metadata.
func commandNote(program []string) string {
	quoted := make([]string, len(program))
	for i, a := range program {
		quoted[i] = shellQuote(a)
	}
	s := strings.Join(quoted, " ")
	if len(s) > dlock.MaxNoteLen {
		cut := dlock.MaxNoteLen - len("…")
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
