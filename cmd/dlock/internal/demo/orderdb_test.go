package demo

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// The stores the order database tests run on: a new SQLite file, and a new
// database on the PostgreSQL server these tests share.
var testStores = []struct {
	name string
	db   func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "orders.db") }},
	{"postgres", func(t *testing.T) string { return testserver.SharedPostgres(t).NewDatabase(t) }},
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// faultPlay is the demo's fault in miniature on the database db: holder 10
// reads order 1 (and is frozen), holder 11 reads and closes it, holder 10
// closes it with its old token. It returns that close's error and the
// refunds per order.
func faultPlay(t *testing.T, db string, fencing bool) (refunds map[int]int, staleErr error) {
	t.Helper()
	ctx := testContext(t)
	if _, err := CreateOrderDB(ctx, db, 1); err != nil {
		t.Fatal(err)
	}
	a, err := openOrderDB(db, fencing)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openOrderDB(db, fencing)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if o, err := a.next(ctx, 10); o != 1 || err != nil {
		t.Fatalf("A's read: %d, %v; want order 1", o, err)
	}
	if o, err := b.next(ctx, 11); o != 1 || err != nil {
		t.Fatalf("B's read: %d, %v; want order 1 (still open)", o, err)
	}
	if err := b.close(ctx, 11, 1, "B"); err != nil {
		t.Fatalf("B's close: %v", err)
	}
	staleErr = a.close(ctx, 10, 1, "A")
	if o, err := b.next(ctx, 11); o != 0 || err != nil {
		t.Fatalf("read after the close: %d, %v; want no order", o, err)
	}
	refunds, err = RefundsIn(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return refunds, staleErr
}

func TestOrderDB_close_staleTokenRefusedByTheDatabase(t *testing.T) {
	for _, s := range testStores {
		t.Run(s.name, func(t *testing.T) {
			refunds, err := faultPlay(t, s.db(t), true)
			var stale *dlock.StaleTokenError
			if !errors.As(err, &stale) || stale.Token != 10 || stale.Recorded != 11 {
				t.Errorf("A's stale close: %v, want a *dlock.StaleTokenError of 10, 11 recorded", err)
			}
			if refunds[1] != 1 {
				t.Errorf("order 1 refunded %d times, want once", refunds[1])
			}
		})
	}
}

func TestOrderDB_close_noFencing_paysTwice(t *testing.T) {
	for _, s := range testStores {
		t.Run(s.name, func(t *testing.T) {
			refunds, err := faultPlay(t, s.db(t), false)
			if err != nil {
				t.Errorf("A's stale close without fencing: %v, want accepted", err)
			}
			if refunds[1] != 2 {
				t.Errorf("order 1 refunded %d times, want twice: the negative control", refunds[1])
			}
		})
	}
}

func TestCreateOrderDB_sqlite_existingFileRefused(t *testing.T) {
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), "orders.db")
	if _, err := CreateOrderDB(ctx, path, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateOrderDB(ctx, path, 1); err == nil {
		t.Fatal("CreateOrderDB of an existing file: no error")
	}
}

// pgConn opens the PostgreSQL database url for the test's own statements.
func pgConn(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func pgExec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.ExecContext(testContext(t), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// pgTables returns which of the demo's tables exist.
func pgTables(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for _, table := range demoTables {
		var ok bool
		if err := db.QueryRowContext(testContext(t), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		got[table] = ok
	}
	return got
}

func pgCount(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(testContext(t), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A table of the demo's name that holds rows is somebody's: the set-up is
// refused with ErrTablesInUse, and leaves the database as it was (the
// other tables not created, the rows untouched).
func TestCreateOrderDB_postgres_tableWithRowsRefusedUntouched(t *testing.T) {
	url := testserver.SharedPostgres(t).NewDatabase(t)
	db := pgConn(t, url)
	pgExec(t, db, "CREATE TABLE "+refundsTable+" (note TEXT)")
	pgExec(t, db, "INSERT INTO "+refundsTable+" VALUES ('theirs')")
	_, err := CreateOrderDB(testContext(t), url, 3)
	if !errors.Is(err, ErrTablesInUse) {
		t.Fatalf("CreateOrderDB with %s holding a row: %v, want ErrTablesInUse", refundsTable, err)
	}
	want := map[string]bool{ordersTable: false, refundsTable: true, fencesTable: false}
	if got := pgTables(t, db); got[ordersTable] || !got[refundsTable] || got[fencesTable] {
		t.Errorf("tables after the refusal: %v, want %v (the set-up rolled back)", got, want)
	}
	if n := pgCount(t, db, refundsTable); n != 1 {
		t.Errorf("%s holds %d rows after the refusal, want its 1", refundsTable, n)
	}
}

// Finish drops the tables the demo created and empties, without dropping,
// those it found empty; with keep, it leaves them all; a second run then
// refuses the kept tables.
func TestOrderTables_Finish_postgres(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	ctx := testContext(t)

	t.Run("created", func(t *testing.T) {
		url := pg.NewDatabase(t)
		tables, err := CreateOrderDB(ctx, url, 3)
		if err != nil {
			t.Fatal(err)
		}
		db := pgConn(t, url)
		if n := pgCount(t, db, ordersTable); n != 3 {
			t.Fatalf("%d orders, want 3", n)
		}
		if err := tables.Finish(ctx, false); err != nil {
			t.Fatal(err)
		}
		for table, ok := range pgTables(t, db) {
			if ok {
				t.Errorf("table %s still exists after Finish", table)
			}
		}
	})

	t.Run("foundEmpty", func(t *testing.T) {
		url := pg.NewDatabase(t)
		db := pgConn(t, url)
		// An administrator's set-up for a user who may not create
		// tables: the orders table, empty.
		pgExec(t, db, "CREATE TABLE "+ordersTable+" (id INTEGER PRIMARY KEY, state TEXT NOT NULL)")
		tables, err := CreateOrderDB(ctx, url, 3)
		if err != nil {
			t.Fatal(err)
		}
		if n := pgCount(t, db, ordersTable); n != 3 {
			t.Fatalf("%d orders in the table found empty, want 3", n)
		}
		if err := tables.Finish(ctx, false); err != nil {
			t.Fatal(err)
		}
		got := pgTables(t, db)
		if !got[ordersTable] || got[refundsTable] || got[fencesTable] {
			t.Errorf("tables after Finish: %v, want only %s, which the demo found", got, ordersTable)
		}
		if n := pgCount(t, db, ordersTable); n != 0 {
			t.Errorf("%s holds %d rows after Finish, want none, as it was found", ordersTable, n)
		}
	})

	t.Run("kept", func(t *testing.T) {
		url := pg.NewDatabase(t)
		tables, err := CreateOrderDB(ctx, url, 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := tables.Finish(ctx, true); err != nil {
			t.Fatal(err)
		}
		db := pgConn(t, url)
		if n := pgCount(t, db, ordersTable); n != 3 {
			t.Fatalf("%d orders kept, want 3", n)
		}
		if _, err := CreateOrderDB(ctx, url, 3); !errors.Is(err, ErrTablesInUse) {
			t.Fatalf("CreateOrderDB over kept tables: %v, want ErrTablesInUse", err)
		}
		if n := pgCount(t, db, ordersTable); n != 3 {
			t.Errorf("%d orders after the refused run, want the 3 kept", n)
		}
		pgExec(t, db, DropStatement) // what the hint tells the user to run
		if got := pgTables(t, db); got[ordersTable] || got[refundsTable] || got[fencesTable] {
			t.Errorf("tables after DropStatement: %v", got)
		}
	})
}

func TestRedactPostgres(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://app:s3cret@db:5432/shop?sslmode=disable": "postgres://app@db:5432/shop?sslmode=disable",
		"postgresql://db/shop?password=s3cret&user=app":      "postgresql://db/shop?password=xxxxx&user=app",
		"postgres:///shop": "postgres:///shop",
	} {
		if got := redactPostgres(in); got != want {
			t.Errorf("redactPostgres(%q) = %q, want %q", in, got, want)
		}
	}
}
