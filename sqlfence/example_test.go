package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/sqlfence"
)

// The job that closes expired orders under a lock, on PostgreSQL: its
// transaction is fenced with the lease's token, so a holder that lost its
// lease while paused writes nothing. (Compile-only: it needs a server and a
// driver, e.g. import _ "github.com/jackc/pgx/v5/stdlib". A runnable
// version on SQLite is in internal/storetest.)
func Example() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0") // with the backend's package imported
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	fences := sqlfence.New(sqlfence.Postgres)
	if err := fences.CreateTable(ctx, db); err != nil { // or fences.CreateStatement() in a migration
		log.Fatal(err)
	}

	lease, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	err = fences.Do(ctx, db, "orders/close-expired", lease.Token(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'closed' WHERE state = 'open' AND due < now()")
		return err
	})
	if errors.Is(err, dlock.ErrStaleToken) {
		log.Print("lost the lock to a newer holder; nothing was written")
	} else if err != nil {
		log.Fatal(err)
	}
}

// Check in a transaction of the caller's own: first, before the writes it
// guards.
func ExampleGuard_Check() {
	var (
		ctx    context.Context
		db     *sql.DB
		lease  *dlock.Lease
		fences = sqlfence.New(sqlfence.Postgres)
	)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := fences.Check(ctx, tx, "ledger", lease.Token()); err != nil {
		log.Print(err) // a *dlock.StaleTokenError when a newer holder has written
		return
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (entry) VALUES ($1)", "…"); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}
