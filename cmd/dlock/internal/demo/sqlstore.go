package demo

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"github.com/dlockdev/dlock/sqlfence"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"
)

// sqlStore is the database engine that a database string names, and how to
// reach it. The demo's SQL is written once, with PostgreSQL's $1
// placeholders; sql rewrites them for SQLite.
type sqlStore struct {
	dialect sqlfence.Dialect
	driver  string // database/sql driver name
	source  string // the SQLite path, or the PostgreSQL URL
}

// IsPostgres reports whether db is a PostgreSQL URL (postgres:// or
// postgresql://) rather than a SQLite path. The CLI makes SQLite paths
// absolute, so that one is never taken for the other.
func IsPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// CheckPostgres parses a PostgreSQL URL as the workers will, so that a bad
// one is refused before the demo starts anything. pgx also takes what the
// URL leaves out from the PG* environment variables and ~/.pgpass.
func CheckPostgres(dsn string) error {
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return fmt.Errorf("%s: %w", redactPostgres(dsn), err)
	}
	return nil
}

// storeOf returns the store of db: a postgres:// (or postgresql://) URL, or
// else the path of a SQLite file.
func storeOf(db string) (sqlStore, error) {
	switch {
	case db == "":
		return sqlStore{}, fmt.Errorf("no database given")
	case IsPostgres(db):
		return sqlStore{dialect: sqlfence.Postgres, driver: "pgx", source: db}, nil
	}
	return sqlStore{dialect: sqlfence.SQLite, driver: "sqlite", source: db}, nil
}

// openStore opens the database db: its store (storeOf) and a connection
// pool (sqlStore.open).
func openStore(db string) (sqlStore, *sql.DB, error) {
	s, err := storeOf(db)
	if err != nil {
		return sqlStore{}, nil, err
	}
	conn, err := s.open()
	return s, conn, err
}

// StoreName is the verdict's name of the store of db: "postgres" or
// "sqlite".
func StoreName(db string) string {
	if IsPostgres(db) {
		return sqlfence.Postgres.String()
	}
	return sqlfence.SQLite.String()
}

// String names the database for messages: SQLite's path, or the URL
// without its password.
func (s sqlStore) String() string {
	if s.dialect == sqlfence.Postgres {
		return redactPostgres(s.source)
	}
	return "sqlite " + s.source
}

// engine is the engine's name for people.
func (s sqlStore) engine() string {
	if s.dialect == sqlfence.Postgres {
		return "PostgreSQL"
	}
	return "SQLite"
}

// sql returns the statement q, written with $1, $2… placeholders, in the
// store's dialect: SQLite's are ?1, ?2…. The demo's statements have no
// other $.
func (s sqlStore) sql(q string) string {
	if s.dialect == sqlfence.SQLite {
		return strings.ReplaceAll(q, "$", "?")
	}
	return q
}

// fences is the SQL guard on the demo's own fence table.
func (s sqlStore) fences() *sqlfence.Guard {
	return sqlfence.New(s.dialect, sqlfence.Table(fencesTable))
}

// open opens the database. sql.Open connects lazily: errors come with the
// first statement.
func (s sqlStore) open() (*sql.DB, error) {
	if s.dialect == sqlfence.Postgres {
		db, err := sql.Open(s.driver, s.source)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		return db, nil
	}
	// The workers are separate processes writing one file: WAL lets
	// readers go on while one writes, busy_timeout makes a writer wait for
	// the write lock instead of failing at once, and BEGIN IMMEDIATE takes
	// that lock at the start of each transaction, so that a transaction
	// never has to upgrade from reading to writing (which SQLite may
	// refuse with SQLITE_BUSY rather than wait).
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(20000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open(s.driver, "file:"+s.source+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return db, nil
}

// redactPostgres returns a PostgreSQL URL fit to print: without the
// password, in the user part or in a password= parameter.
func redactPostgres(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres URL (unparsable)"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}
