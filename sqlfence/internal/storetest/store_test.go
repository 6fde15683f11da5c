package storetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testserver"
	"github.com/dlockdev/dlock/sqlfence"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"modernc.org/sqlite"               // driver "sqlite"
)

// store is one database engine the tests run on: a real PostgreSQL server
// (shared by the package's tests, a database per test) or a real SQLite
// file in the test's temp dir.
type store struct {
	name    string
	dialect sqlfence.Dialect
	driver  string
	// newDSN makes an empty database for t and returns its data source
	// name, for this process and for a child.
	newDSN func(t testing.TB) string
}

var stores = []store{
	{name: "postgres", dialect: sqlfence.Postgres, driver: "pgx", newDSN: func(t testing.TB) string {
		return testserver.SharedPostgres(t).NewDatabase(t)
	}},
	{name: "sqlite", dialect: sqlfence.SQLite, driver: "sqlite", newDSN: func(t testing.TB) string {
		return sqliteDSN(filepath.Join(t.TempDir(), "test.db"), 30*time.Second)
	}},
}

// sqliteDSN is modernc's data source name for a file database in WAL mode
// that waits up to busy for another connection's write lock (SQLite's
// default, 0, fails at once with SQLITE_BUSY).
func sqliteDSN(path string, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	return "file:" + path + "?" + q.Encode()
}

// each runs fn as a subtest on every store.
func each(t *testing.T, fn func(t *testing.T, s store)) {
	t.Helper()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) { fn(t, s) })
	}
}

// open opens dsn with the store's driver, closed when the test ends.
func (s store) open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(s.driver, dsn)
	if err != nil {
		t.Fatalf("%s: open: %v", s.name, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("%s: ping: %v", s.name, err)
	}
	return db
}

// newDB is a new empty database of the store, opened.
func (s store) newDB(t testing.TB) *sql.DB {
	t.Helper()
	return s.open(t, s.newDSN(t))
}

var dollar = regexp.MustCompile(`\$(\d+)`)

// q writes a test's statement, written with PostgreSQL's $1 placeholders,
// in the store's: ?1 for SQLite.
func (s store) q(query string) string {
	if s.dialect == sqlfence.SQLite {
		return dollar.ReplaceAllString(query, "?$1")
	}
	return query
}

// exec runs a statement of the test's setup or failed the test.
func (s store) exec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), s.q(query), args...); err != nil {
		t.Fatalf("%s: %s: %v", s.name, query, err)
	}
}

// recorded returns the token of fence in table, 0 when it has no row.
func recorded(t testing.TB, s store, db *sql.DB, table, fence string) uint64 {
	t.Helper()
	var token int64
	err := db.QueryRow(s.q("SELECT token FROM "+table+" WHERE name = $1"), fence).Scan(&token)
	if err == sql.ErrNoRows {
		return 0
	}
	if err != nil {
		t.Fatalf("%s: read fence %q: %v", s.name, fence, err)
	}
	return uint64(token)
}

// tables lists the database's tables (of the default schema).
func tables(t testing.TB, s store, db *sql.DB) []string {
	t.Helper()
	query := "SELECT table_name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1"
	if s.dialect == sqlfence.SQLite {
		query = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1"
	}
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: list tables: %v", s.name, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// sqliteBusy tells whether err is SQLite's SQLITE_BUSY, or one of its
// extended codes (SQLITE_BUSY_SNAPSHOT, 517).
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == 5
}
