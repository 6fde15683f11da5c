package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/sqlfence"
)

// The orders' database, for --store sqlite and --store postgres://…: the
// orders, and the refunds that closing one pays out, the damage that makes a
// double close visible; and sqlfence's fence table. The names are the
// demo's own, in both engines, so that on a server the user shares with
// other work the demo never reads or writes a table of theirs.
const (
	ordersTable  = "dlock_demo_orders"
	refundsTable = "dlock_demo_refunds"
	fencesTable  = "dlock_demo_fences"
)

// ErrTablesInUse is what Run and CreateOrderDB return when one of the demo's
// tables already exists in the database and holds rows: the demo never
// writes to such a table, which may be somebody else's, or what an earlier
// run left behind with --keep-tables.
var ErrTablesInUse = errors.New("the demo's table already holds rows")

// demoTables are the demo's tables in the order they are created; they are
// dropped in the reverse order (refunds refer to orders).
var demoTables = []string{ordersTable, refundsTable, fencesTable}

// DropStatement is the statement that removes the demo's tables, for the
// user who kept them, or whose run could not drop them.
const DropStatement = "DROP TABLE IF EXISTS " + fencesTable + ", " + refundsTable + ", " + ordersTable

// createStatement returns the statement that creates one of the demo's
// tables in the store's engine.
func (s sqlStore) createStatement(table string) string {
	switch {
	case table == fencesTable:
		return s.fences().CreateStatement()
	case table == ordersTable:
		return "CREATE TABLE " + ordersTable + " (id INTEGER PRIMARY KEY, state TEXT NOT NULL)" // 'expired', then 'closed'
	case s.dialect == sqlfence.Postgres:
		return "CREATE TABLE " + refundsTable + ` (
	order_id INTEGER     NOT NULL REFERENCES ` + ordersTable + ` (id),
	worker   TEXT        NOT NULL,
	token    BIGINT      NOT NULL, -- the closing holder's lock token
	at       TIMESTAMPTZ NOT NULL DEFAULT now()
)`
	}
	return "CREATE TABLE " + refundsTable + ` (
	order_id INTEGER NOT NULL REFERENCES ` + ordersTable + ` (id),
	worker   TEXT    NOT NULL,
	token    INTEGER NOT NULL, -- the closing holder's lock token
	at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
)`
}

// OrderTables is the demo's tables in a database, as CreateOrderDB set
// them up: Finish puts the database back as it was.
type OrderTables struct {
	store sqlStore
	// created are the tables the demo created; found, those that existed,
	// empty, and were used as they were (an administrator may create
	// them for a user who may not create tables: PostgreSQL 15 and later
	// no longer let every user create tables in the public schema).
	created, found []string
}

// CreateOrderDB sets the demo's tables up in the database db (a SQLite
// path, which must not exist, or a postgres:// URL) and fills the orders
// table with orders 1..orders, expired. On PostgreSQL, a table that exists
// already is used only if it is empty; if one holds rows, CreateOrderDB
// returns an error wrapping ErrTablesInUse and changes nothing. The set-up
// is one transaction: it happens entirely or not at all.
func CreateOrderDB(ctx context.Context, db string, orders int) (*OrderTables, error) {
	s, err := storeOf(db)
	if err != nil {
		return nil, err
	}
	if s.dialect == sqlfence.SQLite {
		if _, err := os.Stat(s.source); err == nil {
			return nil, fmt.Errorf("%s: the file exists; the demo creates its own database", s)
		}
	}
	conn, err := s.open()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	t := &OrderTables{store: s}
	err = inTx(ctx, conn, func(tx *sql.Tx) error {
		for _, table := range demoTables {
			exists, err := s.exists(ctx, tx, table)
			if err != nil {
				return fmt.Errorf("look for table %s: %w", table, err)
			}
			if !exists {
				if _, err := tx.ExecContext(ctx, s.createStatement(table)); err != nil {
					return fmt.Errorf("create table %s: %w", table, err)
				}
				t.created = append(t.created, table)
				continue
			}
			var rows bool
			if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+table+")").Scan(&rows); err != nil {
				return fmt.Errorf("table %s exists; cannot tell whether it is empty: %w", table, err)
			}
			if rows {
				return fmt.Errorf("table %s exists: %w", table, ErrTablesInUse)
			}
			t.found = append(t.found, table)
		}
		for o := 1; o <= orders; o++ {
			if _, err := tx.ExecContext(ctx, s.sql("INSERT INTO "+ordersTable+" (id, state) VALUES ($1, 'expired')"), o); err != nil {
				return fmt.Errorf("insert order %d: %w", o, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return t, nil
}

// exists reports whether the table exists, as the next statements would
// find it: on PostgreSQL, along the search_path.
func (s sqlStore) exists(ctx context.Context, tx *sql.Tx, table string) (bool, error) {
	q := "SELECT to_regclass($1) IS NOT NULL"
	if s.dialect == sqlfence.SQLite {
		q = "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = ?1)"
	}
	var ok bool
	err := tx.QueryRowContext(ctx, q, table).Scan(&ok)
	return ok, err
}

// Describe says, for the progress lines, which tables the demo uses and
// what becomes of them at the end.
func (t *OrderTables) Describe(keep bool) string {
	if t.store.dialect == sqlfence.SQLite {
		return strings.Join(demoTables, ", ") + ", in a new file"
	}
	var parts []string
	if len(t.created) > 0 {
		parts = append(parts, "created "+strings.Join(t.created, ", "))
	}
	if len(t.found) > 0 {
		parts = append(parts, "found empty "+strings.Join(t.found, ", "))
	}
	end := "at the end the demo drops them (--keep-tables keeps them)"
	switch {
	case len(t.found) > 0 && len(t.created) > 0:
		end = "at the end the demo drops those it created and empties the others (--keep-tables keeps them)"
	case len(t.found) > 0:
		end = "at the end the demo empties them (--keep-tables keeps them)"
	}
	if keep {
		end = "kept at the end (--keep-tables)"
	}
	return strings.Join(parts, "; ") + "; " + end
}

// Finish, unless keep, puts a PostgreSQL database back as the demo found it:
// it drops the tables it created and deletes the rows of those it found
// empty. On SQLite it does nothing: the file is the demo's own. It does not
// wait long for a lock a straggling worker may hold: it gives up with an
// error that names DropStatement.
func (t *OrderTables) Finish(ctx context.Context, keep bool) error {
	if keep || t.store.dialect == sqlfence.SQLite {
		return nil
	}
	conn, err := t.store.open()
	if err != nil {
		return err
	}
	defer conn.Close()
	err = inTx(ctx, conn, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
			return err
		}
		for i := len(demoTables) - 1; i >= 0; i-- {
			table, stmt := demoTables[i], ""
			switch {
			case containsString(t.created, table):
				stmt = "DROP TABLE " + table
			case containsString(t.found, table):
				stmt = "DELETE FROM " + table
			default:
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: cannot remove the demo's tables: %w; remove them by hand: %s", t.store, err, DropStatement)
	}
	return nil
}

// Finished says what Finish did, for the progress lines.
func (t *OrderTables) Finished(keep bool) string {
	switch {
	case t.store.dialect == sqlfence.SQLite:
		return ""
	case keep:
		return fmt.Sprintf("kept the demo's tables (--keep-tables); remove them with: %s", DropStatement)
	}
	var parts []string
	if len(t.created) > 0 {
		parts = append(parts, "dropped the demo's tables "+strings.Join(t.created, ", "))
	}
	if len(t.found) > 0 {
		parts = append(parts, "emptied "+strings.Join(t.found, ", ")+" again")
	}
	return strings.Join(parts, "; ")
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// inTx runs fn in a transaction of db and commits it if fn returns nil.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// RefundsIn returns, from the database db, how many times each order was
// closed: the number of refunds paid for it.
func RefundsIn(ctx context.Context, db string) (map[int]int, error) {
	s, conn, err := openStore(db)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, "SELECT order_id, count(*) FROM "+refundsTable+" GROUP BY order_id")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	defer rows.Close()
	refunds := map[int]int{}
	for rows.Next() {
		var order, n int
		if err := rows.Scan(&order, &n); err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		refunds[order] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return refunds, nil
}

// orderDB is a worker's connection to the database.
type orderDB struct {
	store sqlStore
	db    *sql.DB
	// fences is the SQL guard; nil with fencing off, when the job's
	// transactions are plain ones.
	fences *sqlfence.Guard
}

// openOrderDB opens the database db (a SQLite path or a postgres:// URL)
// for a worker.
func openOrderDB(db string, fencing bool) (*orderDB, error) {
	s, conn, err := openStore(db)
	if err != nil {
		return nil, err
	}
	o := &orderDB{store: s, db: conn}
	if fencing {
		o.fences = s.fences()
	}
	return o, nil
}

func (o *orderDB) Close() error { return o.db.Close() }

// String names the database for messages, without a password.
func (o *orderDB) String() string { return o.store.String() }

// tx runs fn in a transaction fenced by the token, or a plain one with
// fencing off. A refusal is a *dlock.StaleTokenError.
func (o *orderDB) tx(ctx context.Context, token uint64, fn func(*sql.Tx) error) error {
	if o.fences != nil {
		return o.fences.Do(ctx, o.db, Fence, token, fn)
	}
	return inTx(ctx, o.db, fn)
}

// next returns the next expired order, 0 when none is left. The read is
// fenced too: it records the new holder's token before the holder acts on
// what it read, so that an older holder's close of the same order is
// refused even if it comes before this holder's close.
//
// On PostgreSQL (READ COMMITTED, its default) the SELECT runs after the
// fence row's lock is granted and takes its snapshot then, so it sees the
// close of the previous holder, whose transaction held that lock.
func (o *orderDB) next(ctx context.Context, token uint64) (int, error) {
	var order int
	err := o.tx(ctx, token, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, "SELECT id FROM "+ordersTable+" WHERE state = 'expired' ORDER BY id LIMIT 1").Scan(&order)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	return order, err
}

// close closes the order and pays its refund, whatever its state: closing
// is not idempotent on purpose, so a second close pays twice.
func (o *orderDB) close(ctx context.Context, token uint64, order int, worker string) error {
	return o.tx(ctx, token, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, o.store.sql("UPDATE "+ordersTable+" SET state = 'closed' WHERE id = $1"), order); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, o.store.sql("INSERT INTO "+refundsTable+" (order_id, worker, token) VALUES ($1, $2, $3)"), order, worker, int64(token))
		return err
	})
}

// staleReason says why the database refused a token.
func staleReason(stale *dlock.StaleTokenError) string {
	return fmt.Sprintf("stale token %d: sqlfence's table has recorded token %d", stale.Token, stale.Recorded)
}
