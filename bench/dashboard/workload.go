package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/observability/dlockprom"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// The workload: two instances of a service, each a process with its own
// dlockprom.Metrics on /metrics, as Prometheus sees a fleet.
//
// fleet-a (this process) runs
//   - 6 workers contending for 3 order keys, holding each for 20ms to 2s;
//     one Lock in ten gives up after 300ms (outcome timeout);
//   - a job fired every 5s on 4 clients with NoWait (one runs, three are
//     skipped); one run in four overruns its HoldAtMost (unprotected,
//     hold_limit);
//   - 6 exporters sharing a semaphore of 2 permits;
//   - every 30s a sweep job whose key a janitor deletes from Redis behind
//     its back, and which finishes anyway (lost, dropped; unprotected);
//   - a candidate in the election "scheduler".
//
// fleet-b (a child process) holds a long-lived lock and campaigns in the
// same election. The parent freezes it (SIGSTOP) every 30s for 1.5s (its
// renewals come late, its leases survive) and every other 30s for 5s,
// longer than its TTL of 3s (its leases are lost, and a term it led ends).

// ttl is the workload's lease TTL: short, so that a frozen instance loses
// its leases within seconds. A renewal is due every second.
const ttl = 3 * time.Second

// Names of the workload's keys, the election and the instances.
const (
	electionName = "scheduler"
	sweepKey     = "cleanup/sweep"
	instanceA    = "fleet-a"
	instanceB    = "fleet-b"
)

// instance is one process's Metrics served on /metrics, and the Clients
// that report to it.
type instance struct {
	rdb     *redis.Client
	metrics *dlockprom.Metrics
	srv     *http.Server
	addr    string
	clients []*dlock.Client
}

// newInstance serves a new Metrics on a free loopback port.
func newInstance(redisAddr string) (*instance, error) {
	m := dlockprom.New()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, PoolSize: 64})
	return &instance{rdb: rdb, metrics: m, srv: srv, addr: ln.Addr().String()}, nil
}

// client opens a Client of the instance: another process of the service,
// as far as the lock server can tell.
func (in *instance) client(ctx context.Context) (*dlock.Client, error) {
	c, err := redisdlock.New(ctx, in.rdb, &redisdlock.Options{
		ClientOptions: []dlock.Option{dlock.WithHooks(in.metrics.Hooks()), dlock.WithTTL(ttl)},
	})
	if err != nil {
		return nil, err
	}
	in.clients = append(in.clients, c)
	return c, nil
}

// close closes the Clients (ending their leases) and stops serving.
func (in *instance) close() {
	for _, c := range in.clients {
		_ = c.Close()
	}
	_ = in.srv.Close()
	_ = in.rdb.Close()
}

// fleet is the two instances.
type fleet struct {
	redisAddr string
	a         *instance
	child     *exec.Cmd
	childIn   io.WriteCloser
	childAddr string
	exited    chan struct{}
}

// startFleet starts the two instances; fleet-b is this binary run with
// -child.
func startFleet(ctx context.Context, redisAddr string, log io.Writer) (*fleet, error) {
	a, err := newInstance(redisAddr)
	if err != nil {
		return nil, err
	}
	f := &fleet{redisAddr: redisAddr, a: a, exited: make(chan struct{})}
	exe, err := os.Executable()
	if err != nil {
		a.close()
		return nil, err
	}
	cmd := exec.Command(exe, "-child", redisAddr)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// The child runs until its stdin closes.
	if f.childIn, err = cmd.StdinPipe(); err != nil {
		a.close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		a.close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		a.close()
		return nil, fmt.Errorf("start %s: %w", instanceB, err)
	}
	f.child = cmd
	go func() { _ = cmd.Wait(); close(f.exited) }()
	// Its first line is the address of its /metrics.
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case f.childAddr = <-addr:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	if f.childAddr == "" {
		f.stop()
		return nil, fmt.Errorf("%s did not say where its metrics are", instanceB)
	}
	return f, nil
}

// targets are the instances' /metrics addresses by instance name.
func (f *fleet) targets() map[string]string {
	return map[string]string{instanceA: f.a.addr, instanceB: f.childAddr}
}

// stop ends the child and closes fleet-a.
func (f *fleet) stop() {
	if f.child != nil {
		_ = f.childIn.Close()
		_ = f.child.Process.Signal(syscall.SIGCONT)
		select {
		case <-f.exited:
		case <-time.After(10 * time.Second):
			_ = f.child.Process.Kill()
			<-f.exited
		}
	}
	f.a.close()
}

// run runs fleet-a's workload and freezes fleet-b for d, and returns once
// every goroutine of the workload has.
func (f *fleet) run(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	spawn := func(fn func(ctx context.Context) error) {
		wg.Go(func() {
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				errs <- err
				cancel()
			}
		})
	}
	clients := make([]*dlock.Client, 16)
	for i := range clients {
		c, err := f.a.client(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", instanceA, err)
		}
		clients[i] = c
	}
	for i := range 6 {
		spawn(func(ctx context.Context) error { return worker(ctx, clients[i]) })
	}
	spawn(func(ctx context.Context) error { return scheduledJob(ctx, clients[6:10]) })
	for i := range 6 {
		spawn(func(ctx context.Context) error { return exporter(ctx, clients[10+i%2]) })
	}
	spawn(func(ctx context.Context) error { return sweeper(ctx, clients[12], f.a.rdb) })
	spawn(func(ctx context.Context) error { return candidate(ctx, clients[13], instanceA) })
	spawn(f.freezer)
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// pause waits for d or until ctx ends: the workload's pacing, not a
// synchronisation.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// between returns a random duration in [lo, hi).
func between(lo, hi time.Duration) time.Duration { return lo + rand.N(hi-lo) }

// expected reports whether err is one the workload causes on purpose, or
// the end of the run.
func expected(ctx context.Context, err error) bool {
	return err == nil || ctx.Err() != nil ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrLocked) ||
		errors.Is(err, dlock.ErrLeaseLost) || errors.Is(err, dlock.ErrHoldLimit) || errors.Is(err, dlock.ErrNotHeld)
}

// worker locks one of three order keys, holds it for 20–200ms (and one
// time in five for 0.5–2s), and thinks for 50–300ms; one Lock in ten gives
// up after 300ms.
func worker(ctx context.Context, c *dlock.Client) error {
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("orders/%d", rand.N(3)+1)
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		if n%10 == 9 {
			lctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
		}
		l, err := c.Lock(lctx, key)
		cancel()
		if err != nil {
			if expected(ctx, err) {
				pause(ctx, between(50*time.Millisecond, 300*time.Millisecond))
				continue
			}
			return fmt.Errorf("worker: lock %s: %w", key, err)
		}
		hold := between(20*time.Millisecond, 200*time.Millisecond)
		if rand.N(5) == 0 {
			hold = between(500*time.Millisecond, 2*time.Second)
		}
		pause(ctx, hold)
		if err := l.Unlock(context.Background()); !expected(ctx, err) {
			return fmt.Errorf("worker: unlock %s: %w", key, err)
		}
		pause(ctx, between(50*time.Millisecond, 300*time.Millisecond))
	}
	return nil
}

// scheduledJob fires a job every 5s on every client at once, with NoWait:
// one runs it, the others are skipped. One run in four hangs past its
// HoldAtMost of 1s and finishes without the lock.
func scheduledJob(ctx context.Context, clients []*dlock.Client) error {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		overrun := n%4 == 3
		errs := make(chan error, len(clients))
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() {
				job := func(jctx context.Context) error {
					if overrun {
						pause(ctx, 1500*time.Millisecond) // a job that does not watch its context
						return nil
					}
					pause(jctx, between(time.Second, 2*time.Second))
					return nil
				}
				opts := []dlock.LockOption{dlock.NoWait()}
				if overrun {
					opts = append(opts, dlock.HoldAtMost(time.Second))
				}
				if err := c.Do(ctx, "reports/hourly", job, opts...); !expected(ctx, err) {
					errs <- fmt.Errorf("scheduled job: %w", err)
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := errors.Join(collect(errs)...); err != nil {
			return err
		}
	}
}

// exporter takes one of two permits of a semaphore for 0.3–1.5s.
func exporter(ctx context.Context, c *dlock.Client) error {
	sem := c.Semaphore("exports", 2)
	for ctx.Err() == nil {
		l, err := sem.Acquire(ctx)
		if err != nil {
			if expected(ctx, err) {
				continue
			}
			return fmt.Errorf("exporter: %w", err)
		}
		pause(ctx, between(300*time.Millisecond, 1500*time.Millisecond))
		if err := l.Unlock(context.Background()); !expected(ctx, err) {
			return fmt.Errorf("exporter: unlock: %w", err)
		}
		pause(ctx, between(200*time.Millisecond, 500*time.Millisecond))
	}
	return nil
}

// sweeper runs a sweep job every 30s; while it runs, a janitor deletes its
// key from Redis, and the next renewal finds the grant gone (dropped). The
// job does not watch its context and finishes 2.5s later (unprotected).
func sweeper(ctx context.Context, c *dlock.Client, rdb *redis.Client) error {
	for pause(ctx, 30*time.Second) {
		err := c.Do(ctx, sweepKey, func(context.Context) error {
			// The key's Redis name, as docs/redis.md lays it out.
			if err := rdb.Del(ctx, redisdlock.DefaultPrefix+"{"+sweepKey+"}").Err(); err != nil {
				return fmt.Errorf("janitor: %w", err)
			}
			pause(ctx, 2500*time.Millisecond)
			return nil
		})
		if !expected(ctx, err) {
			return fmt.Errorf("sweeper: %w", err)
		}
	}
	return nil
}

// candidate campaigns in the election, leads for 15–30s or until its term
// is lost, resigns, and campaigns again 2s later.
func candidate(ctx context.Context, c *dlock.Client, name string) error {
	e := c.Election(electionName)
	for ctx.Err() == nil {
		term, err := e.Campaign(ctx, name)
		if err != nil {
			if expected(ctx, err) {
				continue
			}
			return fmt.Errorf("candidate %s: %w", name, err)
		}
		t := time.NewTimer(between(15*time.Second, 30*time.Second))
		select {
		case <-t.C:
		case <-term.Done():
		case <-ctx.Done():
		}
		t.Stop()
		if err := term.Resign(context.Background()); !expected(ctx, err) && !errors.Is(err, dlock.ErrReleased) {
			return fmt.Errorf("candidate %s: resign: %w", name, err)
		}
		pause(ctx, 2*time.Second)
	}
	return nil
}

// freezer stops fleet-b every 30s: for 1.5s at 8s into each period (its
// renewals, due every second, come up to 1.5s late, within the TTL), and
// for 5s at 20s into every other one (longer than the TTL: its leases are
// lost).
func (f *fleet) freezer(ctx context.Context) error {
	freeze := func(d time.Duration) error {
		if err := f.child.Process.Signal(syscall.SIGSTOP); err != nil {
			return fmt.Errorf("freeze %s: %w", instanceB, err)
		}
		pause(ctx, d)
		if err := f.child.Process.Signal(syscall.SIGCONT); err != nil {
			return fmt.Errorf("thaw %s: %w", instanceB, err)
		}
		return nil
	}
	for period := 0; ; period++ {
		if !pause(ctx, 8*time.Second) {
			return nil
		}
		if err := freeze(1500 * time.Millisecond); err != nil {
			return err
		}
		if !pause(ctx, 10500*time.Millisecond) {
			return nil
		}
		if period%2 == 1 {
			if err := freeze(5 * time.Second); err != nil {
				return err
			}
		}
		if !pause(ctx, 10*time.Second-time.Duration(period%2)*5*time.Second) {
			return nil
		}
	}
}

// runChild is fleet-b: it serves its metrics, says where on out, holds a
// lock and campaigns until its stdin closes.
func runChild(ctx context.Context, redisAddr string, out io.Writer) error {
	in, err := newInstance(redisAddr)
	if err != nil {
		return err
	}
	defer in.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	holder, err := in.client(ctx)
	if err != nil {
		return err
	}
	voter, err := in.client(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, in.addr)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		if err := candidate(ctx, voter, instanceB); err != nil {
			errs <- err
		}
	})
	wg.Go(func() {
		if err := longHolder(ctx, holder); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

// longHolder holds a lock until it loses it, and takes it again.
func longHolder(ctx context.Context, c *dlock.Client) error {
	for ctx.Err() == nil {
		l, err := c.Lock(ctx, "ledger/compaction")
		if err != nil {
			if expected(ctx, err) {
				continue
			}
			return fmt.Errorf("holder: %w", err)
		}
		select {
		case <-l.Done():
		case <-ctx.Done():
		}
		if err := l.Unlock(context.Background()); !expected(ctx, err) {
			return fmt.Errorf("holder: unlock: %w", err)
		}
	}
	return nil
}
