package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/cmd/dlock/internal/demo"
)

// demoWorkerCommand is the hidden subcommand that runs one demo worker: the
// demo starts its workers by running its own binary with it.
const demoWorkerCommand = "demo-worker"

func (c *cli) cmdDemo(ctx context.Context, args []string) int {
	f := newFlags("demo")
	backend := f.String("backend", "", "")
	workers := f.Int("workers", 4, "")
	jobs := f.Int("jobs", 6, "")
	ttl := f.Duration("ttl", 2*time.Second, "")
	jobTime := f.Duration("job-time", 400*time.Millisecond, "")
	noFencing := f.Bool("no-fencing", false, "")
	store := f.String("store", "memory", "")
	timeout := f.Duration("timeout", 2*time.Minute, "")
	asJSON := f.Bool("json", false, "")
	if _, code, ok := c.parse(f, args, 0); !ok {
		return code
	}
	sqlitePath, useSQLite, storeOK := parseStore(*store)
	switch {
	case !storeOK:
		return c.usageError("demo", "%s %q: want memory or sqlite[:PATH]", f.source("store"), *store)
	case *workers < demo.MinWorkers || *workers > 64:
		return c.usageError("demo", "%s %d: the demo needs between %d and 64 workers (one is killed, one frozen, one carries on)", f.source("workers"), *workers, demo.MinWorkers)
	case *jobs < demo.MinOrders || *jobs > 1000:
		return c.usageError("demo", "%s %d: the demo needs between %d and 1000 jobs for its faults to hit", f.source("jobs"), *jobs, demo.MinOrders)
	case *ttl < time.Second || *ttl > time.Minute:
		return c.usageError("demo", "%s %v: use a TTL between 1s and 1m (etcd grants whole seconds)", f.source("ttl"), *ttl)
	case *jobTime <= 0 || *jobTime > time.Minute:
		return c.usageError("demo", "%s %v: must be positive and at most 1m", f.source("job-time"), *jobTime)
	case *timeout <= 0:
		return c.usageError("demo", "%s %v: must be positive", f.source("timeout"), *timeout)
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if useSQLite && sqlitePath == "" {
		dir, err := os.MkdirTemp("", "dlock-demo-sqlite-")
		if err != nil {
			return c.fail(exitFailure, err)
		}
		defer os.RemoveAll(dir)
		sqlitePath = filepath.Join(dir, "orders.db")
	} else if useSQLite {
		if _, err := os.Stat(sqlitePath); err == nil {
			return c.fail(exitUsage, fmt.Errorf("%s: sqlite %s: the file exists; the demo creates its own database", f.source("store"), sqlitePath),
				"remove it, pick another path, or leave out :PATH for a temporary file")
		}
		abs, err := filepath.Abs(sqlitePath) // the workers may run elsewhere
		if err != nil {
			return c.fail(exitFailure, err)
		}
		sqlitePath = abs
	}

	progress := c.stdout
	if *asJSON {
		progress = c.stderr
	}
	backendURL, desc := *backend, "lock server at "+redactURL(*backend)
	if backendURL == "" {
		dir, err := os.MkdirTemp("", "dlock-demo-")
		if err != nil {
			return c.fail(exitFailure, err)
		}
		defer os.RemoveAll(dir)
		node, err := startEtcd(ctx, etcdConfig{listen: "127.0.0.1:0", dataDir: dir, log: c.stderr})
		if err != nil {
			return c.fail(exitFailure, fmt.Errorf("cannot start the embedded etcd: %w", err),
				"or run the demo against a server you have: --backend redis://localhost:6379")
		}
		defer node.Close()
		backendURL, desc = node.URL(), "embedded etcd at "+node.URL()
	}

	// Check the backend here, so that a bad URL (or a TTL the backend
	// cannot honour: on ZooKeeper it must equal the session timeout) is
	// one clear error rather than one per worker.
	client, code, ok := c.open(ctx, backendFlags{url: &backendURL, timeout: ptr(defaultConnectTimeout)}, dlock.WithTTL(*ttl))
	if !ok {
		return code
	}
	_ = client.Close()

	exe, err := os.Executable()
	if err != nil {
		return c.fail(exitFailure, fmt.Errorf("cannot find my own binary to start the workers: %w", err))
	}
	v, err := demo.Run(ctx, demo.Config{
		Backend:     backendURL,
		BackendDesc: desc,
		Workers:     *workers,
		Orders:      *jobs,
		TTL:         *ttl,
		JobTime:     *jobTime,
		Fencing:     !*noFencing,
		SQLite:      sqlitePath,
		Timeout:     *timeout,
		Out:         progress,
		Worker: func(w demo.WorkerSpec) *exec.Cmd {
			// Every flag is given, so that none is read from the
			// environment (DLOCK_SQLITE, DLOCK_NO_FENCING).
			cmd := exec.Command(exe, demoWorkerCommand,
				"--backend", w.Backend, "--ledger", w.Ledger, "--name", w.Name,
				"--ttl", w.TTL.String(), "--job-time", w.JobTime.String(),
				"--sqlite", w.SQLite, fmt.Sprintf("--no-fencing=%v", !w.Fencing))
			cmd.SysProcAttr = &syscall.SysProcAttr{}
			setParentDeathSignal(cmd.SysProcAttr)
			return cmd
		},
	})
	if v != nil {
		v.WriteText(progress)
		if *asJSON {
			c.writeJSON(v)
		}
	}
	if err != nil {
		return c.fail(exitFailure, fmt.Errorf("demo: %w", err))
	}
	if !v.Safe {
		return exitFailure
	}
	return exitOK
}

func (c *cli) cmdDemoWorker(ctx context.Context, args []string) int {
	f := newFlags(demoWorkerCommand)
	backend := f.String("backend", "", "")
	ledger := f.String("ledger", "", "")
	name := f.String("name", "", "")
	ttl := f.Duration("ttl", 2*time.Second, "")
	jobTime := f.Duration("job-time", 400*time.Millisecond, "")
	sqlitePath := f.String("sqlite", "", "")
	noFencing := f.Bool("no-fencing", false, "")
	if _, code, ok := c.parse(f, args, 0); !ok {
		return code
	}
	if *backend == "" || *ledger == "" || *name == "" {
		return c.usageError("demo", "%s is started by `dlock demo`, not by hand", demoWorkerCommand)
	}
	client, code, ok := c.open(ctx, backendFlags{url: backend, timeout: ptr(defaultConnectTimeout)},
		dlock.WithTTL(*ttl), dlock.WithMetadata(dlock.Metadata{Note: "dlock demo worker " + *name}))
	if !ok {
		return code
	}
	defer client.Close()
	err := demo.RunWorker(ctx, client, demo.WorkerConfig{Name: *name, Ledger: *ledger, JobTime: *jobTime,
		SQLite: *sqlitePath, Fencing: !*noFencing})
	if err != nil {
		code, _ := c.explain(err, *backend)
		if errors.Is(err, context.Canceled) {
			code = exitFailure
		}
		return c.fail(code, err)
	}
	return exitOK
}

// parseStore reads --store: memory (the demo's ledger), sqlite (a
// temporary database) or sqlite:PATH.
func parseStore(s string) (path string, sqlite, ok bool) {
	switch {
	case s == "memory":
		return "", false, true
	case s == "sqlite":
		return "", true, true
	}
	path, ok = strings.CutPrefix(s, "sqlite:")
	return path, true, ok && path != ""
}

func ptr[T any](v T) *T { return &v }
