// Command closeorders is the seeds' service done right: every instance
// schedules "close expired orders" once per tick, and dlock makes the job
// run once per tick across the fleet, on whichever instance fires first.
// The orders live in a real SQLite table (the pure-Go modernc.org/sqlite
// driver); the instances share its file.
//
// Each instance, at every tick, calls
//
//	client.Do(ctx, "orders/close-expired", closeExpired, dlock.NoWait(), dlock.HoldAtLeast(hold))
//
// NoWait makes the instances that fire while another one runs the job skip
// it; HoldAtLeast keeps the key held for hold after the job started, so
// that instances whose clocks are behind by less than hold (simulated with
// --clock-offset) skip it too, instead of closing the same orders again.
//
//	closeorders --db orders.db --init --orders 60           # create and seed the table
//	closeorders --db orders.db --instance a &              # start N instances
//	closeorders --db orders.db --instance b --clock-offset 200ms &
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/redisdlock"
	_ "modernc.org/sqlite"
)

type config struct {
	backend   string
	db        string
	instance  string
	tick      time.Duration
	ticks     int
	hold      time.Duration
	ttl       time.Duration
	offset    time.Duration
	epochIn   bool // read the schedule's epoch from stdin (for the fleet test)
	dieAtTick int
}

func main() {
	var cfg config
	initDB := flag.Bool("init", false, "create the orders table and exit")
	orders := flag.Int("orders", 60, "with --init: how many orders to seed, expiring one tick after another")
	flag.StringVar(&cfg.backend, "backend", envOr("DLOCK_BACKEND", "redis://127.0.0.1:6379/0"), "lock service URL")
	flag.StringVar(&cfg.db, "db", "orders.db", "SQLite database file shared by the instances")
	flag.StringVar(&cfg.instance, "instance", fmt.Sprintf("pid-%d", os.Getpid()), "this instance's name, recorded with each run")
	flag.DurationVar(&cfg.tick, "tick", time.Second, "the schedule's interval")
	flag.IntVar(&cfg.ticks, "ticks", 0, "stop after this many ticks (0: run until interrupted)")
	flag.DurationVar(&cfg.hold, "hold", 600*time.Millisecond, "minimum hold: longer than the instances' clocks disagree, shorter than --tick")
	flag.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lease TTL: how soon a dead instance's key is freed")
	flag.DurationVar(&cfg.offset, "clock-offset", 0, "simulate a clock this far behind: fire this late")
	flag.BoolVar(&cfg.epochIn, "epoch-from-stdin", false, "print \"ready\", then read the schedule's epoch (Unix ms) from stdin")
	flag.IntVar(&cfg.dieAtTick, "die-at-tick", 0, "simulate a crash: SIGKILL this process in the middle of the job of this tick")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *initDB {
		err = initOrders(ctx, cfg.db, *orders)
	} else {
		err = serve(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "closeorders:", err)
		os.Exit(1)
	}
}

func openDB(path string) (*sql.DB, error) {
	// WAL and a busy timeout: several processes write the same file.
	return sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)")
}

// initOrders creates the tables: orders (order i expires at tick i/3+1, so
// that every tick has orders to close) and runs (one row per run of the
// job: which tick, which instance, which fencing token).
func initOrders(ctx context.Context, path string, n int) error {
	db, err := openDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `
		CREATE TABLE orders (id INTEGER PRIMARY KEY, expires_tick INTEGER NOT NULL,
			state TEXT NOT NULL DEFAULT 'open', closed_tick INTEGER, closed_by TEXT);
		CREATE TABLE runs (tick INTEGER NOT NULL, instance TEXT NOT NULL, token INTEGER NOT NULL);`)
	if err != nil {
		return err
	}
	for i := range n {
		if _, err := db.ExecContext(ctx, `INSERT INTO orders (expires_tick) VALUES (?)`, i/3+1); err != nil {
			return err
		}
	}
	return nil
}

func serve(ctx context.Context, cfg config) error {
	db, err := openDB(cfg.db)
	if err != nil {
		return err
	}
	defer db.Close()
	client, err := dlock.Open(ctx, cfg.backend, dlock.WithTTL(cfg.ttl),
		dlock.WithMetadata(dlock.Metadata{Note: "closeorders " + cfg.instance}))
	if err != nil {
		return err
	}
	defer client.Close()

	// The schedule: tick k is due at epoch + k*tick by the instance's
	// clock, which is cfg.offset behind the real one.
	epoch := time.Now().Truncate(cfg.tick)
	if cfg.epochIn {
		fmt.Println("ready")
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading the epoch: %w", err)
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if err != nil {
			return fmt.Errorf("reading the epoch: %w", err)
		}
		epoch = time.UnixMilli(ms)
	}
	for k := 1; cfg.ticks == 0 || k <= cfg.ticks; k++ {
		due := epoch.Add(time.Duration(k)*cfg.tick + cfg.offset)
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait): // the schedule itself
			case <-ctx.Done():
				return nil
			}
		}
		err := client.Do(ctx, "orders/close-expired", func(ctx context.Context) error {
			return closeExpired(ctx, db, cfg, k)
		}, dlock.NoWait(), dlock.HoldAtLeast(cfg.hold))
		switch {
		case err == nil:
		case errors.Is(err, dlock.ErrLocked):
			// Another instance runs it, or ran it less than cfg.hold ago.
		case ctx.Err() != nil:
			return nil
		default:
			fmt.Fprintf(os.Stderr, "closeorders %s: tick %d: %v\n", cfg.instance, k, err)
		}
	}
	return nil
}

// closeExpired is the job: it records its run and closes the orders that
// have expired by tick k, in one transaction. The fencing token goes with
// the run: a database that must refuse a stale holder's writes can compare
// it with the highest one it has seen.
func closeExpired(ctx context.Context, db *sql.DB, cfg config, k int) error {
	lease, _ := dlock.LeaseFromContext(ctx)
	if _, err := db.ExecContext(ctx, `INSERT INTO runs (tick, instance, token) VALUES (?, ?, ?)`, k, cfg.instance, lease.Token()); err != nil {
		return err
	}
	if k == cfg.dieAtTick {
		// A crash in the middle of the job: the run is recorded, the
		// orders are not closed, the lease is not released.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	_, err := db.ExecContext(ctx, `UPDATE orders SET state = 'closed', closed_tick = ?, closed_by = ?
		WHERE state = 'open' AND expires_tick <= ?`, k, cfg.instance, k)
	return err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
