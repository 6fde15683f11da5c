package storetest_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/sqlfence"
)

// The ordering tests: a transaction that has checked holds the fence until
// it ends, and another transaction's Check of the same fence waits for it
// and then judges its token against what the first one committed.

// waitForLockWait polls the server's own view of its sessions until
// session waits for a lock (the fence row held by another transaction),
// for at most a minute, and fails t otherwise: PostgreSQL's
// pg_stat_activity, InnoDB's information_schema.innodb_trx. Polling the
// server is what makes "B is blocked" an observed fact instead of a guess
// from a sleep.
func waitForLockWait(t *testing.T, s store, db *sql.DB, session int64, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		waiting, err := s.waiting(db, session)
		if err != nil {
			t.Fatalf("%s: is session %d waiting: %v", s.name, session, err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: session %d did not wait for a lock within a minute", s.name, session)
		}
		select {
		case err := <-done:
			t.Fatalf("the second Check returned (%v) while the first transaction was open, want it to wait", err)
		case <-time.After(s.waitPoll):
		}
	}
}

// txs begins and checks the transactions of an ordering test.
type txs struct {
	t   *testing.T
	ctx context.Context
	s   store
	db  *sql.DB
	g   *sqlfence.Guard
	opt *sql.TxOptions // nil: the server's default isolation
}

// newTxs gives t a database of its own on s, with the fence table, and
// txs on it at the server's default isolation.
func newTxs(t *testing.T, s store) txs {
	t.Helper()
	ctx := ctxT(t)
	db := s.newDB(t)
	g := sqlfence.New(s.dialect)
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	return txs{t: t, ctx: ctx, s: s, db: db, g: g}
}

// hold begins a transaction that checks token and stays open.
func (x txs) hold(fence string, token uint64) *sql.Tx {
	x.t.Helper()
	tx, err := x.db.BeginTx(x.ctx, x.opt)
	if err != nil {
		x.t.Fatal(err)
	}
	x.t.Cleanup(func() { _ = tx.Rollback() })
	if err := x.g.Check(x.ctx, tx, fence, token); err != nil {
		x.t.Fatalf("Check(%d): %v", token, err)
	}
	return tx
}

// waiter begins a transaction, then Checks token in a goroutine, once its
// session is known (on PostgreSQL, asking for it takes a REPEATABLE READ
// transaction's snapshot, before the Check); it returns when the server
// shows the Check waiting for a lock.
func (x txs) waiter(fence string, token uint64) (*sql.Tx, chan error) {
	x.t.Helper()
	tx, err := x.db.BeginTx(x.ctx, x.opt)
	if err != nil {
		x.t.Fatal(err)
	}
	x.t.Cleanup(func() { _ = tx.Rollback() })
	session := x.s.session(x.t, tx)
	done := make(chan error, 1)
	go func() { done <- x.g.Check(x.ctx, tx, fence, token) }()
	waitForLockWait(x.t, x.s, x.db, session, done)
	return tx, done
}

// order runs the two transactions of an ordering case on fence: one
// checks first and stays open (hold), the other checks second and waits
// for it (waiter); then end ((*sql.Tx).Commit or Rollback) ends the first.
// It returns the second transaction, still open, and what its Check
// returned.
func (x txs) order(fence string, first, second uint64, end func(*sql.Tx) error) (*sql.Tx, error) {
	x.t.Helper()
	tx := x.hold(fence, first)
	waiter, done := x.waiter(fence, second)
	if err := end(tx); err != nil {
		x.t.Fatal(err)
	}
	return waiter, <-done
}

// wantRecorded fails the test unless fence is recorded at token.
func (x txs) wantRecorded(fence string, token uint64) {
	x.t.Helper()
	if got := recorded(x.t, x.s, x.db, sqlfence.DefaultTable, fence); got != token {
		x.t.Fatalf("recorded %d, want %d", got, token)
	}
}

// TestCheck_serverOrdersTransactions, on PostgreSQL and MariaDB: while
// transaction A (token 5) that has checked is open, B's Check (token 6)
// waits for A's row lock (observed in the server's view of its sessions),
// and succeeds once A commits; and the other way round, while B (6) is
// open, A's Check (5) waits, and is refused as stale once B commits. Each
// order both on an existing fence row and on a missing one (where the
// waiter waits on the first one's uncommitted INSERT, and on MariaDB
// under REPEATABLE READ, InnoDB's default, must neither deadlock nor pass).
func TestCheck_serverOrdersTransactions(t *testing.T) {
	for _, s := range stores {
		if s.session == nil {
			continue
		}
		t.Run(s.name, func(t *testing.T) { serverOrders(t, s) })
	}
}

func serverOrders(t *testing.T, s store) {
	x := newTxs(t, s)
	for _, row := range []string{"existing row", "missing row"} {
		// fence is a new fence name; on "existing row" it is recorded at
		// token 1 first.
		n := 0
		fence := func() string {
			n++
			f := fmt.Sprintf("%s %d", row, n)
			if row == "existing row" {
				if err := check(t, x.g, x.db, f, 1); err != nil {
					t.Fatal(err)
				}
			}
			return f
		}
		t.Run(row, func(t *testing.T) {
			t.Run("newer waits, then records", func(t *testing.T) {
				x.t = t
				f := fence()
				b, err := x.order(f, 5, 6, (*sql.Tx).Commit)
				if err != nil {
					t.Fatalf("B's Check after A committed: %v", err)
				}
				if err := b.Commit(); err != nil {
					t.Fatal(err)
				}
				x.wantRecorded(f, 6)
			})
			t.Run("older waits, then is stale", func(t *testing.T) {
				x.t = t
				f := fence()
				a, err := x.order(f, 6, 5, (*sql.Tx).Commit)
				wantStale(t, err, f, 5, 6)
				_ = a.Rollback()
				x.wantRecorded(f, 6)
			})
			t.Run("the same token waits too", func(t *testing.T) {
				// A Check that records nothing new (MySQL: no UPDATE)
				// holds the row all the same.
				x.t = t
				f := fence()
				if err := check(t, x.g, x.db, f, 5); err != nil {
					t.Fatal(err)
				}
				b, err := x.order(f, 5, 5, (*sql.Tx).Commit)
				if err != nil {
					t.Fatalf("B's Check after A committed: %v", err)
				}
				if err := b.Commit(); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("waiter after a rollback sees the old record", func(t *testing.T) {
				x.t = t
				f := fence()
				a, err := x.order(f, 6, 5, (*sql.Tx).Rollback)
				if err != nil {
					t.Fatalf("A's Check after B rolled back: %v", err)
				}
				if err := a.Commit(); err != nil {
					t.Fatal(err)
				}
				x.wantRecorded(f, 5)
			})
		})
	}
}

// TestCheck_postgresRepeatableRead pins what docs/fencing.md, section SQL says of
// REPEATABLE READ: a transaction that waited for the fence row fails with a
// serialization error (SQLSTATE 40001) when the other one commits, rather
// than recording its token; retried, it records.
func TestCheck_postgresRepeatableRead(t *testing.T) {
	x := newTxs(t, mustStore(t, "postgres"))
	if err := check(t, x.g, x.db, "rr", 1); err != nil {
		t.Fatal(err)
	}
	a := x.hold("rr", 5)
	rr := x
	rr.opt = &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	b, done := rr.waiter("rr", 6)
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "40001") {
		t.Fatalf("REPEATABLE READ Check after the other committed: %v, want a serialization failure (40001)", err)
	}
	_ = b.Rollback()
	retry := rr.hold("rr", 6)
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
	s := mustStore(t, "sqlite")
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

// TestCheck_sqliteReadBeforeCheckIsBusy pins what docs/fencing.md, section SQL says
// of SQLite: a transaction that reads before Check holds a snapshot, and
// when another connection commits meanwhile, Check fails at once with
// SQLITE_BUSY (a busy timeout cannot help: waiting would not make the
// snapshot current) instead of waiting or judging the token. Begun
// IMMEDIATE (modernc: _txlock=immediate), the same transaction works.
func TestCheck_sqliteReadBeforeCheckIsBusy(t *testing.T) {
	s := mustStore(t, "sqlite")
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
