package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Dialect is the SQL of one database engine for a fence table.
type Dialect struct {
	name string
	// create makes the table; %s is the table's name.
	create string
	// maxName is the longest fence name in bytes the table holds; 0 for
	// no limit.
	maxName int
	// record records the tokens; an interface holding a comparable
	// value (not a func), so that Dialects compare with ==.
	record recorder
}

// recorder is how a dialect records a token.
type recorder interface {
	// record records token for the fence in tx unless a higher token is
	// recorded, and holds the fence row until tx ends either way. It
	// returns whether token was recorded and, when not, the higher token
	// (0 if it could not be read).
	record(ctx context.Context, tx *sql.Tx, table, fence string, token int64) (ok bool, higher int64, err error)
}

// String returns the dialect's name.
func (d Dialect) String() string { return d.name }

// The dialects. Each takes the fence row's write lock before it compares
// tokens, and the database keeps the lock until the transaction ends
// whether or not the token was recorded, so a concurrent Check of the same
// fence waits for this transaction and then sees its token.
var (
	// Postgres is PostgreSQL (9.5 and later), through any database/sql
	// driver (pgx's stdlib, lib/pq).
	Postgres = Dialect{
		name:   "postgres",
		create: "CREATE TABLE IF NOT EXISTS %s (name TEXT PRIMARY KEY, token BIGINT NOT NULL)",
		record: upsertReturning{
			upsert: "INSERT INTO %[1]s AS f (name, token) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token RETURNING f.token",
			read:   "SELECT token FROM %s WHERE name = $1",
		},
	}

	// SQLite is SQLite (3.35 and later: RETURNING), through any
	// database/sql driver (modernc.org/sqlite, mattn/go-sqlite3). SQLite
	// has one writer at a time: the upsert takes the database's write lock
	// for the rest of the transaction.
	SQLite = Dialect{
		name:   "sqlite",
		create: "CREATE TABLE IF NOT EXISTS %s (name TEXT PRIMARY KEY, token INTEGER NOT NULL)",
		record: upsertReturning{
			upsert: "INSERT INTO %s (name, token) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE token <= excluded.token RETURNING token",
			read:   "SELECT token FROM %s WHERE name = ?1",
		},
	}
)

// upsertReturning records with one statement, upsert: an upsert whose
// update is conditional on the recorded token being at most the caller's,
// returning the row when it was written and no row when the condition
// failed. The database locks the row for the statement whether or not the
// condition held; read then reads the higher token, under that lock. Both
// are formats of the table's name; their arguments are (name, token) and
// (name).
type upsertReturning struct{ upsert, read string }

func (u upsertReturning) record(ctx context.Context, tx *sql.Tx, table, fence string, token int64) (bool, int64, error) {
	var got int64
	err := tx.QueryRowContext(ctx, fmt.Sprintf(u.upsert, table), fence, token).Scan(&got)
	switch {
	case err == nil:
		return true, 0, nil
	case !errors.Is(err, sql.ErrNoRows):
		return false, 0, err
	}
	// No row: the recorded token is higher. A failure to read it leaves
	// the refusal as it is, without the number.
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(u.read, table), fence).Scan(&got); err != nil {
		got = 0
	}
	return false, got, nil
}
