package storetest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/sqlfence"
)

// The ordering tests: a transaction that has checked holds the fence until
// it ends, and another transaction's Check of the same fence waits for it
// and then judges its token against what the first one committed.

// backendPID returns the PostgreSQL backend of tx's connection.
func backendPID(t *testing.T, tx *sql.Tx) int {
	t.Helper()
	var pid int
	if err := tx.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitForLockWait polls pg_stat_activity until backend pid waits for a
// lock (a row lock: the fence row held by another transaction), for at most
// a minute, and fails t otherwise. Polling the server's own view is what
// makes "B is blocked" an observed fact instead of a guess from a sleep.
func waitForLockWait(t *testing.T, db *sql.DB, pid int, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting bool
		err := db.QueryRow("SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		if err != nil {
			t.Fatalf("pg_stat_activity of backend %d: %v", pid, err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d did not wait for a lock within a minute", pid)
		}
		select {
		case err := <-done:
			t.Fatalf("the second Check returned (%v) while the first transaction was open, want it to wait", err)
		case <-time.After(5 * time.Millisecond): // the poll's pace
		}
	}
}

// TestCheck_postgresOrdersTransactions: on PostgreSQL, while transaction
// A (token 5) that has checked is open, B's Check (token 6) waits for A's
// row lock (observed in pg_stat_activity), and succeeds once A commits;
// and the other way round, while B (6) is open, A's Check (5) waits, and
// is refused as stale once B commits.
func TestCheck_postgresOrdersTransactions(t *testing.T) {
	s := stores[0]
	ctx := ctxT(t)
	db := s.newDB(t)
	g := sqlfence.New(s.dialect)
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	// hold begins a transaction that checks token and stays open.
	hold := func(fence string, token uint64) *sql.Tx {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		if err := g.Check(ctx, tx, fence, token); err != nil {
			t.Fatalf("Check(%d): %v", token, err)
		}
		return tx
	}
	// waiter begins a transaction, then Checks token in a goroutine, once
	// its backend is known.
	waiter := func(fence string, token uint64) (*sql.Tx, int, chan error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		pid := backendPID(t, tx)
		done := make(chan error, 1)
		go func() { done <- g.Check(ctx, tx, fence, token) }()
		return tx, pid, done
	}

	t.Run("newer waits, then records", func(t *testing.T) {
		a := hold("ab", 5)
		b, pid, done := waiter("ab", 6)
		waitForLockWait(t, db, pid, done)
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("B's Check after A committed: %v", err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := recorded(t, s, db, sqlfence.DefaultTable, "ab"); got != 6 {
			t.Fatalf("recorded %d, want 6", got)
		}
	})

	t.Run("older waits, then is stale", func(t *testing.T) {
		b := hold("ba", 6)
		a, pid, done := waiter("ba", 5)
		waitForLockWait(t, db, pid, done)
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		wantStale(t, <-done, "ba", 5, 6)
		_ = a.Rollback()
		if got := recorded(t, s, db, sqlfence.DefaultTable, "ba"); got != 6 {
			t.Fatalf("recorded %d, want 6", got)
		}
	})

	t.Run("newer first on a new fence row", func(t *testing.T) {
		// No row yet: B's INSERT waits on A's uncommitted one (the unique
		// index), not on a row lock of an existing row.
		a := hold("fresh", 5)
		b, pid, done := waiter("fresh", 6)
		waitForLockWait(t, db, pid, done)
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("B's Check after A committed: %v", err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("waiter after a rollback sees the old record", func(t *testing.T) {
		b := hold("rb", 6)
		a, pid, done := waiter("rb", 5)
		waitForLockWait(t, db, pid, done)
		if err := b.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("A's Check after B rolled back: %v", err)
		}
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := recorded(t, s, db, sqlfence.DefaultTable, "rb"); got != 5 {
			t.Fatalf("recorded %d, want 5", got)
		}
	})
}

// TestCheck_postgresRepeatableRead pins what docs/fencing-sql.md says of
// REPEATABLE READ: a transaction that waited for the fence row fails with a
// serialization error (SQLSTATE 40001) when the other one commits, rather
// than recording its token; retried, it records.
func TestCheck_postgresRepeatableRead(t *testing.T) {
	s := stores[0]
	ctx := ctxT(t)
	db := s.newDB(t)
	g := sqlfence.New(s.dialect)
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := check(t, g, db, "rr", 1); err != nil {
		t.Fatal(err)
	}
	a, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback()
	if err := g.Check(ctx, a, "rr", 5); err != nil {
		t.Fatal(err)
	}
	b, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	pid := backendPID(t, b) // takes B's snapshot
	done := make(chan error, 1)
	go func() { done <- g.Check(ctx, b, "rr", 6) }()
	waitForLockWait(t, db, pid, done)
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "40001") {
		t.Fatalf("REPEATABLE READ Check after the other committed: %v, want a serialization failure (40001)", err)
	}
	_ = b.Rollback()
	retry, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer retry.Rollback()
	if err := g.Check(ctx, retry, "rr", 6); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := retry.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestCheck_sqliteOrdersTransactions: SQLite has one writer at a time, so
// a transaction that has checked holds the database's write lock until it
// ends. The test shows that instead of watching a waiter (SQLite has no
// view of waiting connections, and modernc's driver no busy-handler hook):
//   - while A (token 5) is open, B's Check (token 6) on a connection that
//     does not wait (busy_timeout 0) fails with SQLITE_BUSY: nothing can
//     record between A's Check and A's end;
//   - once A commits, B's Check succeeds;
//   - the other way round, while B (6) is open, A's Check (5) on a
//     connection that waits (busy_timeout 30 s) has not returned when B
//     commits (checked just before) and returns stale after. Whether A's
//     Check began waiting before B's commit or ran after it, the outcome
//     must be stale; what the test pins is that it never succeeds.
func TestCheck_sqliteOrdersTransactions(t *testing.T) {
	s := stores[1]
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "order.db")
	db := s.open(t, sqliteDSN(path, 30*time.Second))
	impatient := s.open(t, sqliteDSN(path, 0))
	g := sqlfence.New(s.dialect)
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	begin := func(db *sql.DB) *sql.Tx {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		return tx
	}

	a := begin(db)
	if err := g.Check(ctx, a, "ab", 5); err != nil {
		t.Fatal(err)
	}
	b := begin(impatient)
	err := g.Check(ctx, b, "ab", 6)
	if !sqliteBusy(err) {
		t.Fatalf("B's Check while A is open: %v, want SQLITE_BUSY", err)
	}
	_ = b.Rollback()
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	b = begin(impatient)
	if err := g.Check(ctx, b, "ab", 6); err != nil {
		t.Fatalf("B's Check after A committed: %v", err)
	}

	// B (6) is open; A (5) waits for it.
	a = begin(db)
	done := make(chan error, 1)
	go func() { done <- g.Check(context.Background(), a, "ab", 5) }()
	select {
	case err := <-done:
		t.Fatalf("A's Check returned (%v) while B was open, want it to wait", err)
	default:
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	wantStale(t, <-done, "ab", 5, 6)
	_ = a.Rollback()
	if got := recorded(t, s, db, sqlfence.DefaultTable, "ab"); got != 6 {
		t.Fatalf("recorded %d, want 6", got)
	}
}

// TestCheck_sqliteReadBeforeCheckIsBusy pins what docs/fencing-sql.md says
// of SQLite: a transaction that reads before Check holds a snapshot, and
// when another connection commits meanwhile, Check fails at once with
// SQLITE_BUSY (a busy timeout cannot help: waiting would not make the
// snapshot current) instead of waiting or judging the token. Begun
// IMMEDIATE (modernc: _txlock=immediate), the same transaction works.
func TestCheck_sqliteReadBeforeCheckIsBusy(t *testing.T) {
	s := stores[1]
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "snap.db")
	db := s.open(t, sqliteDSN(path, 30*time.Second))
	g := sqlfence.New(s.dialect)
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	a, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback()
	var n int
	if err := a.QueryRowContext(ctx, "SELECT count(*) FROM "+sqlfence.DefaultTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, db, "f", 6, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err = g.Check(ctx, a, "f", 7)
	if !sqliteBusy(err) {
		t.Fatalf("Check after a read, another commit between: %v, want SQLITE_BUSY", err)
	}
	_ = a.Rollback()

	immediate := s.open(t, sqliteDSN(path, 30*time.Second)+"&_txlock=immediate")
	a, err = immediate.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback()
	if err := a.QueryRowContext(ctx, "SELECT count(*) FROM "+sqlfence.DefaultTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, a, "f", 7); err != nil {
		t.Fatalf("IMMEDIATE transaction: %v", err)
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
}
