package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
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
	keepTables := f.Bool("keep-tables", false, "")
	timeout := f.Duration("timeout", 2*time.Minute, "")
	asJSON := f.Bool("json", false, "")
	viaGateway := f.Bool("gateway", false, "")
	if _, code, ok := c.parse(f, args, 0); !ok {
		return code
	}
	kind, db, storeOK := parseStore(*store)
	switch {
	case !storeOK:
		return c.usageError("demo", "%s %q: want memory, sqlite[:PATH] or postgres://…", f.source("store"), redactURL(*store))
	case *keepTables && kind != storePostgres:
		return c.usageError("demo", "%s: only with --store postgres://… (a SQLite file given as sqlite:PATH is kept anyway)", f.source("keep-tables"))
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
	case *viaGateway && kind != storeMemory:
		return c.usageError("demo", "%s: only with --store memory: the Python and Java workers close the orders at the ledger", f.source("gateway"))
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	switch {
	case kind == storeSQLite && db == "":
		dir, err := os.MkdirTemp("", "dlock-demo-sqlite-")
		if err != nil {
			return c.fail(exitFailure, err)
		}
		defer os.RemoveAll(dir)
		db = filepath.Join(dir, "orders.db")
	case kind == storeSQLite:
		if _, err := os.Stat(db); err == nil {
			return c.fail(exitUsage, fmt.Errorf("%s: sqlite %s: the file exists; the demo creates its own database", f.source("store"), db),
				"remove it, pick another path, or leave out :PATH for a temporary file")
		}
		// Absolute, because the workers may run elsewhere, and so that
		// it can never be taken for a postgres:// URL.
		abs, err := filepath.Abs(db)
		if err != nil {
			return c.fail(exitFailure, err)
		}
		db = abs
	case kind == storePostgres:
		if err := demo.CheckPostgres(db); err != nil {
			return c.fail(exitUsage, fmt.Errorf("%s: %w", f.source("store"), err))
		}
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
	var gw *demo.Gateway
	if *viaGateway {
		// The gateway keeps this client: its leases are the workers'.
		defer client.Close()
		fmt.Fprintf(progress, "dlock demo: compiling the Java client and worker (javac), starting the gateway…\n")
		if gw, code, ok = c.startDemoGateway(ctx, client); !ok {
			return code
		}
		defer gw.Close()
	} else {
		_ = client.Close()
	}

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
		DB:          db,
		KeepTables:  *keepTables,
		Timeout:     *timeout,
		Out:         progress,
		Gateway:     gw,
		Worker: func(w demo.WorkerSpec) *exec.Cmd {
			if gw != nil {
				cmd := gw.Command(w)
				cmd.SysProcAttr = &syscall.SysProcAttr{}
				setParentDeathSignal(cmd.SysProcAttr)
				return cmd
			}
			// Every flag is given, so that none is read from the
			// environment (DLOCK_DB, DLOCK_NO_FENCING). The database URL
			// is on the workers' command lines, as the backend's is: a
			// password is better kept in PGPASSWORD or ~/.pgpass, which
			// the workers inherit and pgx reads.
			cmd := exec.Command(exe, demoWorkerCommand,
				"--backend", w.Backend, "--ledger", w.Ledger, "--name", w.Name,
				"--ttl", w.TTL.String(), "--job-time", w.JobTime.String(),
				"--db", w.DB, fmt.Sprintf("--no-fencing=%v", !w.Fencing))
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
	switch {
	case errors.Is(err, demo.ErrTablesInUse):
		return c.fail(exitUsage, fmt.Errorf("demo: %w", err),
			"the demo uses only tables it creates, or finds empty; if these are left from an earlier `dlock demo --keep-tables`, remove them: "+demo.DropStatement,
			"or give the demo a schema of its own: add ?search_path=SCHEMA to the URL")
	case err != nil:
		return c.fail(exitFailure, fmt.Errorf("demo: %w", err))
	}
	if !v.Safe {
		return exitFailure
	}
	return exitOK
}

// startDemoGateway starts the gateway of `dlock demo --gateway` over
// client, saying what to install if python3 or a JDK is missing.
func (c *cli) startDemoGateway(ctx context.Context, client *dlock.Client) (*demo.Gateway, int, bool) {
	gw, err := demo.StartGateway(ctx, client)
	switch {
	case errors.Is(err, demo.ErrMissingTool):
		var pkgs []string
		for _, t := range demo.Tools {
			if !slices.Contains(pkgs, t.Package) {
				pkgs = append(pkgs, t.Package)
			}
		}
		return nil, c.fail(exitUnavailable, fmt.Errorf("demo --gateway: %w", err),
			"its workers are Python and Java programs: it needs python3 (3.9 or later), and a JDK 17 or later for javac and java",
			"on Debian or Ubuntu: apt-get install "+strings.Join(pkgs, " ")+"; or run the demo without --gateway"), false
	case err != nil:
		return nil, c.fail(exitFailure, fmt.Errorf("demo --gateway: %w", err)), false
	}
	return gw, 0, true
}

func (c *cli) cmdDemoWorker(ctx context.Context, args []string) int {
	f := newFlags(demoWorkerCommand)
	backend := f.String("backend", "", "")
	ledger := f.String("ledger", "", "")
	name := f.String("name", "", "")
	ttl := f.Duration("ttl", 2*time.Second, "")
	jobTime := f.Duration("job-time", 400*time.Millisecond, "")
	db := f.String("db", "", "")
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
		SQLite: *db, Fencing: !*noFencing})
	if err != nil {
		code, _ := c.explain(err, *backend)
		if errors.Is(err, context.Canceled) {
			code = exitFailure
		}
		return c.fail(code, err)
	}
	return exitOK
}

// The stores of --store.
const (
	storeMemory   = "memory"   // the demo's ledger
	storeSQLite   = "sqlite"   // a SQLite file
	storePostgres = "postgres" // a PostgreSQL database the user gives
)

// parseStore reads --store: memory, sqlite (a temporary database),
// sqlite:PATH, or a postgres:// or postgresql:// URL. db is the path ("" for
// a temporary one) or the URL.
func parseStore(s string) (kind, db string, ok bool) {
	switch {
	case s == "memory":
		return storeMemory, "", true
	case s == "sqlite":
		return storeSQLite, "", true
	case demo.IsPostgres(s):
		return storePostgres, s, true
	}
	path, ok := strings.CutPrefix(s, "sqlite:")
	return storeSQLite, path, ok && path != ""
}

func ptr[T any](v T) *T { return &v }
