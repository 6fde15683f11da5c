package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/sqlfence"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// The demo's database, for --store sqlite: the orders, and the refunds that
// closing one pays out, the damage that makes a double close visible. The
// fence table is sqlfence's.
const orderTables = `
CREATE TABLE orders (
	id    INTEGER PRIMARY KEY,
	state TEXT NOT NULL -- 'expired', then 'closed'
);
CREATE TABLE refunds (
	order_id INTEGER NOT NULL REFERENCES orders (id),
	worker   TEXT    NOT NULL,
	token    INTEGER NOT NULL, -- the closing holder's lock token
	at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);`

// openSQLite opens the SQLite database at path. The workers are separate
// processes writing one file: WAL lets readers go on while one writes,
// busy_timeout makes a writer wait for the write lock instead of failing
// at once, and BEGIN IMMEDIATE takes that lock at the start of each
// transaction, so that a transaction never has to upgrade from reading to
// writing (which SQLite may refuse with SQLITE_BUSY rather than wait).
func openSQLite(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(20000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return db, nil
}

// CreateOrderDB creates the demo's database at path, which must not exist:
// the tables, sqlfence's fence table, and orders 1..orders expired.
func CreateOrderDB(ctx context.Context, path string, orders int) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("sqlite %s: the file exists; the demo creates its own database", path)
	}
	db, err := openSQLite(path)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, orderTables); err != nil {
		return fmt.Errorf("sqlite %s: create tables: %w", path, err)
	}
	if err := sqlfence.New(sqlfence.SQLite).CreateTable(ctx, db); err != nil {
		return fmt.Errorf("sqlite %s: %w", path, err)
	}
	for o := 1; o <= orders; o++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO orders (id, state) VALUES (?, 'expired')", o); err != nil {
			return fmt.Errorf("sqlite %s: %w", path, err)
		}
	}
	return nil
}

// RefundsIn returns, from the database at path, how many times each order
// was closed: the number of refunds paid for it.
func RefundsIn(ctx context.Context, path string) (map[int]int, error) {
	db, err := openSQLite(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT order_id, count(*) FROM refunds GROUP BY order_id")
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	defer rows.Close()
	refunds := map[int]int{}
	for rows.Next() {
		var order, n int
		if err := rows.Scan(&order, &n); err != nil {
			return nil, err
		}
		refunds[order] = n
	}
	return refunds, rows.Err()
}

// orderDB is a worker's connection to the database.
type orderDB struct {
	db *sql.DB
	// fences is the SQL guard; nil with fencing off, when the job's
	// transactions are plain ones.
	fences *sqlfence.Guard
}

func openOrderDB(path string, fencing bool) (*orderDB, error) {
	db, err := openSQLite(path)
	if err != nil {
		return nil, err
	}
	o := &orderDB{db: db}
	if fencing {
		o.fences = sqlfence.New(sqlfence.SQLite)
	}
	return o, nil
}

func (o *orderDB) Close() error { return o.db.Close() }

// tx runs fn in a transaction fenced by the token, or a plain one with
// fencing off. A refusal is a *dlock.StaleTokenError.
func (o *orderDB) tx(ctx context.Context, token uint64, fn func(*sql.Tx) error) error {
	if o.fences != nil {
		return o.fences.Do(ctx, o.db, Fence, token, fn)
	}
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// next returns the next expired order, 0 when none is left. The read is
// fenced too: it records the new holder's token before the holder acts on
// what it read, so that an older holder's close of the same order is
// refused even if it comes before this holder's close.
func (o *orderDB) next(ctx context.Context, token uint64) (int, error) {
	var order int
	err := o.tx(ctx, token, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, "SELECT id FROM orders WHERE state = 'expired' ORDER BY id LIMIT 1").Scan(&order)
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
		if _, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'closed' WHERE id = ?", order); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO refunds (order_id, worker, token) VALUES (?, ?, ?)", order, worker, int64(token))
		return err
	})
}

// staleReason says why the database refused a token.
func staleReason(stale *dlock.StaleTokenError) string {
	return fmt.Sprintf("stale token %d: sqlfence's table has recorded token %d", stale.Token, stale.Recorded)
}
