package sqlfence_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/sqlfence"
)

// The tests against real databases are in internal/storetest, a module of
// its own (see its doc.go); these need none.

// TestCreateStatement_documented pins the statements that doc.go and
// docs/fencing.md, section SQL show.
func TestCreateStatement_documented(t *testing.T) {
	for _, c := range []struct {
		g    *sqlfence.Guard
		want string
	}{
		{sqlfence.New(sqlfence.Postgres), "CREATE TABLE IF NOT EXISTS dlock_fences (name TEXT PRIMARY KEY, token BIGINT NOT NULL)"},
		{sqlfence.New(sqlfence.SQLite), "CREATE TABLE IF NOT EXISTS dlock_fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL)"},
		{sqlfence.New(sqlfence.MySQL), "CREATE TABLE IF NOT EXISTS dlock_fences (name VARBINARY(512) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB"},
		{sqlfence.New(sqlfence.Postgres, sqlfence.Table("ops.fences")), "CREATE TABLE IF NOT EXISTS ops.fences (name TEXT PRIMARY KEY, token BIGINT NOT NULL)"},
		{sqlfence.New(sqlfence.Postgres, sqlfence.Table("ops.fences; --")), ""},
		{sqlfence.New(sqlfence.Dialect{}), ""},
	} {
		if got := c.g.CreateStatement(); got != c.want {
			t.Errorf("CreateStatement = %q\nwant %q", got, c.want)
		}
	}
}

// TestCheck_invalidBeforeTheDatabase: bad arguments are refused before
// anything is sent (the transaction is not even looked at).
func TestCheck_invalidBeforeTheDatabase(t *testing.T) {
	g := sqlfence.New(sqlfence.Postgres)
	for _, c := range []struct {
		fence string
		token uint64
	}{{"", 1}, {"f", 0}, {"f", math.MaxInt64 + 1}, {"f", 1}} {
		if err := g.Check(context.Background(), nil, c.fence, c.token); !errors.Is(err, dlock.ErrInvalidFence) {
			t.Errorf("Check(nil, %q, %d) = %v, want dlock.ErrInvalidFence", c.fence, c.token, err)
		}
	}
	// MySQL's names are at most MySQLMaxFenceLen bytes; the others' have
	// no limit.
	long := strings.Repeat("f", sqlfence.MySQLMaxFenceLen+1)
	if err := sqlfence.New(sqlfence.MySQL).Check(context.Background(), nil, long, 1); !errors.Is(err, dlock.ErrInvalidFence) || !strings.Contains(err.Error(), "513 bytes") {
		t.Errorf("MySQL: Check(nil, %d bytes, 1) = %v, want dlock.ErrInvalidFence naming the length", len(long), err)
	}
	if err := sqlfence.New(sqlfence.Postgres).Check(context.Background(), nil, long, 1); errors.Is(err, dlock.ErrInvalidFence) && !strings.Contains(err.Error(), "nil *sql.Tx") {
		t.Errorf("Postgres: Check(nil, %d bytes, 1) = %v, want only the nil tx refused", len(long), err)
	}
	if got := sqlfence.Postgres.String() + " " + sqlfence.SQLite.String() + " " + sqlfence.MySQL.String(); got != "postgres sqlite mysql" {
		t.Errorf("dialect names %q", got)
	}
}
