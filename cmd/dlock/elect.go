package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/backoff"
)

// envLeaderValue is the variable that gives PROGRAM of `dlock elect` the
// value it publishes as leader, beside run's DLOCK_KEY, DLOCK_TOKEN and
// DLOCK_MODE. It is not DLOCK_VALUE, the variable of --value: a dlock
// elect that PROGRAM runs would then publish its parent's value
// (TestElectVariableIsNoFlag).
const envLeaderValue = "DLOCK_LEADER_VALUE"

// defaultTermPause is how long `dlock elect` waits after a term before it
// campaigns again. The other candidates are in the queue already and take
// over at once; the pause only spares the server, and the machine, a tight
// loop of campaigns and process starts when PROGRAM fails at once and
// nobody else campaigns.
const defaultTermPause = time.Second

// electionShape is how `dlock run`'s supervision sees a term: the one
// exclusive holder of the key.
var electionShape = runShape{kind: dlock.KindElection, limit: 1, mode: dlock.Exclusive}

func (c *cli) cmdElect(ctx context.Context, args []string) int {
	f := newFlags("elect")
	backend := addBackendFlags(f)
	value := f.String("value", "", "")
	once := f.Bool("once", false, "")
	pause := f.Duration("pause", defaultTermPause, "")
	ttl := f.Duration("ttl", dlock.DefaultTTL, "")
	grace := f.Duration("grace", 0, "")
	verbose := f.Bool("verbose", false, "")
	f.BoolVar(verbose, "v", false, "")
	metricsAddr := addMetricsFlag(f)
	pos, code, ok := c.parse(f, args, -1)
	if !ok {
		return code
	}
	key, program, code, ok := c.keyAndProgram("elect", pos, "while leading the election")
	if !ok {
		return code
	}
	ttlSet, code, ok := c.checkTTL("elect", f, *ttl)
	if !ok {
		return code
	}
	graceSet, code, ok := c.checkGrace("elect", f, *grace, *ttl, ttlSet)
	if !ok {
		return code
	}
	if *pause < 0 {
		return c.usageError("elect", "%s %v: must not be negative", f.source("pause"), *pause)
	}
	if len(*value) > dlock.MaxValueLen {
		return c.usageError("elect", "%s: the value is %d bytes long, the limit is %d", f.source("value"), len(*value), dlock.MaxValueLen)
	}
	// A PROGRAM that cannot start would make every term fail at once,
	// after taking leadership from a candidate that might have worked:
	// refuse before campaigning. (supervise still reports a start that
	// fails later, and the loop goes on.)
	if _, err := exec.LookPath(program[0]); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return c.fail(code, fmt.Errorf("cannot run %s: %w", program[0], err), "PROGRAM runs without a shell; to use shell syntax, run sh -c '…'")
	}
	// PROGRAM's environment is built by supervise from dlock's own.
	if err := os.Setenv(envLeaderValue, *value); err != nil {
		return c.fail(exitFailure, err)
	}

	metrics, stopMetrics, code, ok := c.startClientMetrics(f, *metricsAddr, *verbose)
	if !ok {
		return code
	}
	defer stopMetrics()

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals()...)
	defer signal.Stop(sigs)
	relay := relaySignals(sigs)
	defer relay.stop()
	octx, stopWatch := cancelOnSignal(ctx, relay.out)

	client, code, ok := c.open(octx, backend, withMetrics(programOptions(program, *ttl, ttlSet), metrics)...)
	if s := stopWatch(); s != nil {
		if client != nil {
			client.Close()
		}
		return c.campaignInterrupted(s, key)
	}
	if !ok {
		return code
	}
	defer client.Close()

	el := &elector{
		c: c, client: client, election: client.Election(key), value: *value, program: program,
		relay: relay, grace: *grace, graceSet: graceSet, ttlSet: ttlSet, backendURL: *backend.url,
		graceSource: f.source("grace"), verbose: *verbose,
	}
	for term := 1; ; term++ {
		wait := time.Duration(0)
		if term > 1 {
			wait = *pause
			if *verbose {
				fmt.Fprintf(c.stderr, "dlock: campaigning again for %q in %v\n", key, fmtDuration(wait))
			}
		}
		status, again := el.term(ctx, wait)
		if !again || *once {
			return status
		}
	}
}

// elector is one `dlock elect`: it campaigns, supervises PROGRAM for each
// term, and campaigns again.
type elector struct {
	c           *cli
	client      *dlock.Client
	election    *dlock.Election
	value       string
	program     []string
	relay       *signalRelay
	grace       time.Duration
	graceSet    bool
	ttlSet      bool
	backendURL  string
	graceSource string
	verbose     bool
}

// term waits pause, campaigns, runs PROGRAM while leading and resigns. It
// returns dlock's exit status if it were to exit now, and whether to
// campaign again: not after a signal that ends programs (a term's or the
// campaign's), nor after an error that another campaign would only repeat.
func (e *elector) term(ctx context.Context, pause time.Duration) (status int, again bool) {
	c, key := e.c, e.election.Key()
	// Signals are caught while campaigning as while `dlock run` waits: the
	// first one leaves the queue, and dlock exits 128+N.
	cctx, stopWatch := cancelOnSignal(ctx, e.relay.out)
	var (
		lead *dlock.Leadership
		err  error
	)
	if pause > 0 && backoff.Sleep(cctx, pause) != nil {
		err = cctx.Err()
	} else {
		if e.verbose {
			if who := c.describeHolder(e.client, key); who != "" {
				fmt.Fprintf(c.stderr, "dlock: campaigning for %q, %s\n", key, who)
			} else {
				fmt.Fprintf(c.stderr, "dlock: campaigning for %q\n", key)
			}
		}
		lead, err = e.election.Campaign(cctx, e.value)
	}
	if s := stopWatch(); s != nil {
		if lead != nil {
			resign(lead)
		}
		return c.campaignInterrupted(s, key), false
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return exitFailure, false
	case errors.Is(err, dlock.ErrKindMismatch):
		return c.fail(exitKindMismatch, err, c.electionKindHint(e.client, key)), false
	default:
		code, hints := c.explain(err, e.backendURL)
		return c.fail(code, err, hints...), false
	}

	lease := lead.Lease()
	grace := e.grace
	if !e.graceSet {
		grace = defaultGrace(lease.TTL())
	}
	if grace >= lease.TTL() {
		resign(lead)
		return c.fail(exitUsage, fmt.Errorf("%s %v: must be shorter than the lease's TTL, %v; PROGRAM was not started", e.graceSource, grace, lease.TTL()),
			graceHint(e.backendURL, e.ttlSet)), false
	}
	if e.verbose {
		fmt.Fprintf(c.stderr, "dlock: leading %q (token %d, TTL %v)\n", key, lease.Token(), lease.TTL())
	}
	// supervise releases the lease (resigns) once PROGRAM's group is
	// gone, and stops the group if leadership is lost first.
	status = c.supervise(lease, electionShape, e.program, e.relay.out, grace, 0, e.verbose)
	if e.relay.ending() {
		// The signal went to PROGRAM's group: dlock was told to stop,
		// and exits with PROGRAM's status, as dlock run does.
		return status, false
	}
	if status != exitOK && status != exitLeaseLost {
		c.warnf("%s exited with status %d", e.program[0], status)
	}
	return status, true
}

// resign ends a term that PROGRAM never ran in.
func resign(lead *dlock.Leadership) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = lead.Resign(ctx)
}

// campaignInterrupted reports a signal that came while dlock elect did not
// lead (campaigning, or pausing between terms), and returns 128+N as the
// signal's default action would.
func (c *cli) campaignInterrupted(s os.Signal, key string) int {
	fmt.Fprintf(c.stderr, "dlock: %s while campaigning for %q; PROGRAM is not running\n", signalName(s), key)
	return exitSignal + signalNumber(s)
}

// electionKindHint follows ErrKindMismatch, whose message names what the
// key is.
func (c *cli) electionKindHint(client *dlock.Client, key string) string {
	status := "`dlock status " + key + "` shows who holds it and how"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	in, err := client.Inspect(ctx, key)
	if err != nil || len(in.Holders)+len(in.Waiters) == 0 || in.Kind == dlock.KindElection {
		return "a key serves one kind (lock, semaphore, read-write lock, election) while anybody holds or waits for it; " + status
	}
	return fmt.Sprintf("its holders and waiters use it as a %s: hold the election on another key; %s", kindName(in.Kind, in.Limit), status)
}
