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

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/sqlfence"
	"github.com/go-sql-driver/mysql"   // driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"modernc.org/sqlite"               // driver "sqlite"
)

// store is one database engine the tests run on: a real PostgreSQL or
// MariaDB server (each shared by the package's tests, a database per test)
// or a real SQLite file in the test's temp dir.
type store struct {
	name    string
	dialect sqlfence.Dialect
	driver  string
	// newDSN makes an empty database for t and returns its data source
	// name, for this process and for a child.
	newDSN func(t testing.TB) string
	// session and waiting show a transaction waiting for a lock, on the
	// servers: session returns the server's id of tx's connection,
	// waiting whether that connection waits for a lock now. nil for
	// SQLite, which has no such view.
	session func(t testing.TB, tx *sql.Tx) int64
	waiting func(db *sql.DB, session int64) (bool, error)
	// waitPoll is how often to ask waiting.
	waitPoll time.Duration
}

var stores = []store{
	{name: "postgres", dialect: sqlfence.Postgres, driver: "pgx", newDSN: func(t testing.TB) string {
		return testserver.SharedPostgres(t).NewDatabase(t)
	}},
	{name: "sqlite", dialect: sqlfence.SQLite, driver: "sqlite", newDSN: func(t testing.TB) string {
		return sqliteDSN(filepath.Join(t.TempDir(), "test.db"), 30*time.Second)
	}},
	{name: "mariadb", dialect: sqlfence.MySQL, driver: "mysql", newDSN: func(t testing.TB) string {
		return testserver.SharedMariaDB(t).NewDatabase(t)
	}},
}

func init() {
	// Set here, not in the literal: the functions refer to stores.
	stores[0].waitPoll = 5 * time.Millisecond
	stores[0].session = func(t testing.TB, tx *sql.Tx) int64 {
		return sessionID(t, tx, "SELECT pg_backend_pid()")
	}
	stores[0].waiting = func(db *sql.DB, pid int64) (bool, error) {
		var waiting bool
		err := db.QueryRow("SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		return waiting, err
	}
	// InnoDB refreshes information_schema.innodb_trx from the live
	// transactions only when the view has not been read for 100 ms
	// (CACHE_MIN_IDLE_TIME_US in trx0i_s.cc); polled more often, it
	// shows the same stale rows forever.
	stores[2].waitPoll = 150 * time.Millisecond
	stores[2].session = func(t testing.TB, tx *sql.Tx) int64 {
		return sessionID(t, tx, "SELECT CONNECTION_ID()")
	}
	stores[2].waiting = func(db *sql.DB, id int64) (bool, error) {
		// InnoDB's own view: a transaction in LOCK WAIT waits for a row
		// (or gap) lock. A connection with no transaction yet has no
		// row, which is not waiting.
		var n int
		err := db.QueryRow("SELECT count(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'", id).Scan(&n)
		return n > 0, err
	}
}

// sessionID runs query, which returns the id of the connection, in tx.
func sessionID(t testing.TB, tx *sql.Tx, query string) int64 {
	t.Helper()
	var id int64
	if err := tx.QueryRow(query).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// storeNamed returns the store of that name.
func storeNamed(name string) (store, error) {
	for _, s := range stores {
		if s.name == name {
			return s, nil
		}
	}
	return store{}, fmt.Errorf("no store %q", name)
}

// mustStore is storeNamed for a test.
func mustStore(t testing.TB, name string) store {
	t.Helper()
	s, err := storeNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
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
// in the store's: ?1 for SQLite, ? for MySQL, whose placeholders have no
// numbers: there they must come as $1, $2, … in order, each once.
func (s store) q(query string) string {
	switch s.name {
	case "sqlite":
		return dollar.ReplaceAllString(query, "?$1")
	case "mariadb":
		next := 1
		return dollar.ReplaceAllStringFunc(query, func(p string) string {
			if p != fmt.Sprintf("$%d", next) {
				panic(fmt.Sprintf("store.q: %q: MySQL needs $1, $2, … in order", query))
			}
			next++
			return "?"
		})
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
	switch s.name {
	case "sqlite":
		query = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1"
	case "mariadb":
		query = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY 1"
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

// mysqlError tells whether err is the MySQL server's error number.
func mysqlError(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

// The MySQL errors the tests expect.
const (
	mysqlDeadlock      = 1213 // ER_LOCK_DEADLOCK: the transaction was rolled back
	mysqlRecordChanged = 1020 // ER_CHECKREAD: innodb_snapshot_isolation refused a locking read
)

// sqliteBusy tells whether err is SQLite's SQLITE_BUSY, or one of its
// extended codes (SQLITE_BUSY_SNAPSHOT, 517).
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == 5
}
