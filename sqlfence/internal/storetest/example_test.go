package storetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/sqlfence"
	_ "modernc.org/sqlite"
)

// A job closes orders under a lock, fencing its transaction with the
// lease's token; a holder that lost its lease (token 41, while the newer
// holder's 42 has been recorded) writes nothing. The tokens stand for
// lease.Token() of two leases of one lock. It runs on SQLite, which needs
// no server; with PostgreSQL, New(sqlfence.Postgres) and $1 placeholders.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlfence-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// busy_timeout: wait for another writer's transaction instead of
	// failing with SQLITE_BUSY.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO orders (state) VALUES ('expired'), ('expired'), ('open')"); err != nil {
		log.Fatal(err)
	}

	fences := sqlfence.New(sqlfence.SQLite)
	if err := fences.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}
	closeExpired := func(token uint64) error {
		return fences.Do(ctx, db, "close-orders", token, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'closed' WHERE state = 'expired'")
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			fmt.Printf("token %d closed %d orders\n", token, n)
			return nil
		})
	}

	if err := closeExpired(42); err != nil {
		log.Fatal(err)
	}
	err = closeExpired(41) // the holder that was paused past its TTL
	fmt.Println(errors.Is(err, dlock.ErrStaleToken), err)
	// Output:
	// token 42 closed 2 orders
	// true fence "close-orders": dlock: stale fencing token: 41, and 42 is recorded
}

// The per-row variant: the protected table carries a fence column, and the
// write itself is conditional on it, so a stale holder's UPDATE matches no
// row. No fence table, no extra statement; each row is fenced on its own.
func Example_perRow() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlfence-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	for _, st := range []string{
		"CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT NOT NULL, fence INTEGER NOT NULL DEFAULT 0)",
		"INSERT INTO orders (id, state) VALUES (7, 'open')",
	} {
		if _, err := db.ExecContext(ctx, st); err != nil {
			log.Fatal(err)
		}
	}
	closeOrder := func(id int, token uint64) {
		// PostgreSQL: … fence = $2 WHERE id = $1 AND fence <= $2
		res, err := db.ExecContext(ctx, "UPDATE orders SET state = 'closed', fence = ?2 WHERE id = ?1 AND fence <= ?2", id, int64(token))
		if err != nil {
			log.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			fmt.Printf("token %d: stale, order %d untouched\n", token, id)
			return
		}
		fmt.Printf("token %d: order %d closed\n", token, id)
	}
	closeOrder(7, 42)
	closeOrder(7, 41)
	// Output:
	// token 42: order 7 closed
	// token 41: stale, order 7 untouched
}
