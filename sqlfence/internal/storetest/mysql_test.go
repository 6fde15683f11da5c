package storetest_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/sqlfence"
)

// The MySQL dialect's own cases, on MariaDB: InnoDB's locks under
// REPEATABLE READ, its default isolation.

// TestCheck_mysqlTwoWaiters: A has checked (token 5) and holds the fence
// row, B and C wait for it (observed in innodb_trx), and A commits or rolls
// back. When A commits, and on an existing row when it rolls back, the
// waiters take the row in turn. On a missing row that A rolls back, the row
// A inserted goes with the rollback, InnoDB turns the waiters' lock
// requests into gap locks that block each other's insert, and it picks one
// as a deadlock victim (ERROR 1213), rolls that transaction back, and the
// other goes on: MariaDB 10.11 does so each time. What the test pins, for
// both orders of the waiters: every Check either records, is stale for a
// token that committed, or is that deadlock (only on a missing row that A
// rolled back) — never another error, and never an older token committed
// after a newer one. The same under READ COMMITTED and SERIALIZABLE.
func TestCheck_mysqlTwoWaiters(t *testing.T) {
	x := newTxs(t, mustStore(t, "mariadb"))
	n := 0
	type twoWaiters struct {
		row, end string
		order    [2]uint64
		iso      sql.IsolationLevel
	}
	cases := []twoWaiters{
		{"existing row", "commits", [2]uint64{6, 7}, sql.LevelDefault},
		{"existing row", "rolls back", [2]uint64{6, 7}, sql.LevelDefault},
		{"existing row", "rolls back", [2]uint64{7, 6}, sql.LevelDefault},
		{"missing row", "commits", [2]uint64{6, 7}, sql.LevelDefault},
		{"missing row", "commits", [2]uint64{7, 6}, sql.LevelDefault},
		{"missing row", "rolls back", [2]uint64{6, 7}, sql.LevelDefault},
		{"missing row", "rolls back", [2]uint64{7, 6}, sql.LevelDefault},
	}
	// The other isolation levels behave the same, the deadlock included
	// (READ COMMITTED takes no gap locks for reads, but still for the
	// duplicate-key check of an insert).
	for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelSerializable} {
		cases = append(cases,
			twoWaiters{"existing row", "rolls back", [2]uint64{6, 7}, iso},
			twoWaiters{"missing row", "rolls back", [2]uint64{6, 7}, iso})
	}
	for _, c := range cases {
		row, order := c.row, c.order
		t.Run(fmt.Sprintf("%s, A %s, %d then %d, %v", row, c.end, order[0], order[1], c.iso), func(t *testing.T) {
			x.t = t
			x.opt = &sql.TxOptions{Isolation: c.iso} // LevelDefault: the server's
			n++
			f := fmt.Sprintf("f%d", n)
			if row == "existing row" {
				if err := check(t, x.g, x.db, f, 1); err != nil {
					t.Fatal(err)
				}
			}
			a := x.hold(f, 5)
			type waiter struct {
				token uint64
				tx    *sql.Tx
				done  chan error
			}
			var ws []waiter
			for _, token := range order {
				tx, done := x.waiter(f, token)
				ws = append(ws, waiter{token, tx, done})
			}
			committed := map[uint64]bool{}
			var last uint64
			if c.end == "commits" {
				if err := a.Commit(); err != nil {
					t.Fatal(err)
				}
				committed[5], last = true, 5
			} else if err := a.Rollback(); err != nil {
				t.Fatal(err)
			}
			// Whichever Check returns first is committed (or rolled
			// back) before the other's is read: the other may be
			// waiting for it.
			deadlocks := 0
			for range ws {
				var w waiter
				var err error
				select {
				case err = <-ws[0].done:
					w, ws = ws[0], ws[1:]
				case err = <-ws[len(ws)-1].done:
					w, ws = ws[len(ws)-1], ws[:len(ws)-1]
				}
				var stale *dlock.StaleTokenError
				switch {
				case err == nil:
					if err := w.tx.Commit(); err != nil {
						t.Fatalf("commit %d: %v", w.token, err)
					}
					if w.token < last {
						t.Fatalf("token %d committed after %d", w.token, last)
					}
					committed[w.token], last = true, w.token
				case errors.As(err, &stale):
					if !committed[stale.Recorded] || stale.Recorded <= w.token {
						t.Fatalf("token %d refused for %d, not a newer committed token", w.token, stale.Recorded)
					}
					_ = w.tx.Rollback()
				case mysqlError(err, mysqlDeadlock):
					deadlocks++
					_ = w.tx.Rollback()
				default:
					t.Fatalf("Check(%d): %v, want it recorded, stale or ERROR 1213", w.token, err)
				}
				t.Logf("Check(%d): %v", w.token, err)
			}
			if deadlocks == len(order) {
				t.Fatal("both waiters were deadlock victims")
			}
			if deadlocks > 0 && (row == "existing row" || c.end == "commits") {
				t.Fatalf("%d deadlocks on an %s that A %s", deadlocks, row, c.end)
			}
			if got := recorded(t, x.s, x.db, sqlfence.DefaultTable, f); got != last {
				t.Fatalf("recorded %d, want %d, the last committed", got, last)
			}
		})
	}
}

// TestCheck_mysqlRepeatableRead pins what docs/fencing.md, section SQL says of
// MySQL's default isolation. B (REPEATABLE READ) has read before its
// Check, so its snapshot predates A's commit of token 7:
//   - B's Check of token 6 is refused as stale, although B's snapshot
//     still shows the old token 1 (the negative control: a comparison
//     with a plain SELECT, which reads the snapshot, would have let 6
//     overwrite 7; Check's SELECT … FOR UPDATE reads the latest row);
//   - B's Check of token 8 records, but B's plain reads still show the data
//     of before A's commit: a read before Check pins a stale snapshot,
//     hence "call Check first";
//   - C, whose Check comes first, waits for A's transaction, and then
//     reads A's data: its snapshot is taken after Check;
//   - with innodb_snapshot_isolation=ON (MariaDB 11.6's default), the same
//     Check fails with ERROR 1020 (record changed since the snapshot)
//     instead: an error to retry, never a stale write.
func TestCheck_mysqlRepeatableRead(t *testing.T) {
	s := mustStore(t, "mariadb")
	ctx := ctxT(t)
	db := s.newDB(t)
	db.SetMaxIdleConns(0) // the session variable below stays with its connection
	g := sqlfence.New(s.dialect)
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	s.exec(t, db, "CREATE TABLE data (k VARCHAR(64) PRIMARY KEY, v TEXT NOT NULL)")
	s.exec(t, db, "INSERT INTO data VALUES ('job', 'none')")
	token := uint64(1)
	// snapshotThenNewer begins B under REPEATABLE READ, reads (taking the
	// snapshot), lets A record newer and write "A<newer>", and returns B.
	snapshotThenNewer := func(newer uint64, setup ...string) *sql.Tx {
		t.Helper()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		for _, st := range setup {
			if _, err := conn.ExecContext(ctx, st); err != nil {
				t.Fatalf("%s: %v", st, err)
			}
		}
		b, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Rollback() })
		if got := txRecorded(t, b); got != token {
			t.Fatalf("B's first read: %d, want %d", got, token)
		}
		if err := g.Do(ctx, db, "rr", newer, func(tx *sql.Tx) error { return writeJob(ctx, s, tx, fmt.Sprintf("A%d", newer)) }); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if err := check(t, g, db, "rr", token); err != nil {
		t.Fatal(err)
	}

	b := snapshotThenNewer(7)
	wantStale(t, g.Check(ctx, b, "rr", 6), "rr", 6, 7)
	if got := txRecorded(t, b); got != 1 {
		t.Fatalf("B's snapshot shows token %d, want the old 1 (the read a plain SELECT would have judged by)", got)
	}
	_ = b.Rollback()
	token = 7

	b = snapshotThenNewer(8)
	if err := g.Check(ctx, b, "rr", 9); err != nil {
		t.Fatalf("Check(9) after 8 committed: %v", err)
	}
	var v string
	if err := b.QueryRowContext(ctx, "SELECT v FROM data WHERE k = 'job'").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != "A7" {
		t.Fatalf("B, read before Check, reads %q after it, want the stale snapshot's A7 (A8 committed before B's Check)", v)
	}
	_ = b.Rollback()
	token = 8

	x := txs{t: t, ctx: ctx, s: s, db: db, g: g, opt: &sql.TxOptions{Isolation: sql.LevelRepeatableRead}}
	a := x.hold("rr", 9)
	if err := writeJob(ctx, s, a, "A9"); err != nil {
		t.Fatal(err)
	}
	c, done := x.waiter("rr", 10)
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("C's Check after A committed: %v", err)
	}
	if err := c.QueryRowContext(ctx, "SELECT v FROM data WHERE k = 'job'").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != "A9" {
		t.Fatalf("C, Check first, reads %q after it, want A9, what A committed while C waited", v)
	}
	_ = c.Rollback()
	token = 9

	var on string
	if err := db.QueryRowContext(ctx, "SELECT @@innodb_snapshot_isolation").Scan(&on); err != nil {
		t.Logf("innodb_snapshot_isolation not known to this server (%v): its case not run", err)
		return
	}
	b = snapshotThenNewer(10, "SET SESSION innodb_snapshot_isolation = ON")
	err := g.Check(ctx, b, "rr", 11)
	if !mysqlError(err, mysqlRecordChanged) {
		t.Fatalf("Check with innodb_snapshot_isolation=ON after another commit: %v, want ERROR 1020", err)
	}
	_ = b.Rollback()
	if got := recorded(t, s, db, sqlfence.DefaultTable, "rr"); got != 10 {
		t.Fatalf("recorded %d, want 10", got)
	}
}

// txRecorded reads fence "rr"'s token with a plain (snapshot) read in tx.
func txRecorded(t *testing.T, tx *sql.Tx) uint64 {
	t.Helper()
	var token int64
	if err := tx.QueryRow("SELECT token FROM " + sqlfence.DefaultTable + " WHERE name = 'rr'").Scan(&token); err != nil {
		t.Fatal(err)
	}
	return uint64(token)
}
