package sqlfence_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/sqlfence"
)

// The tests against real databases are in internal/storetest, a module of
// its own (see its doc.go); these need none.

// TestCreateStatement_documented pins the statements that doc.go and
// docs/fencing-sql.md show.
func TestCreateStatement_documented(t *testing.T) {
	for _, c := range []struct {
		g    *sqlfence.Guard
		want string
	}{
		{sqlfence.New(sqlfence.Postgres), "CREATE TABLE IF NOT EXISTS dlock_fences (name TEXT PRIMARY KEY, token BIGINT NOT NULL)"},
		{sqlfence.New(sqlfence.SQLite), "CREATE TABLE IF NOT EXISTS dlock_fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL)"},
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
	if got := sqlfence.Postgres.String() + " " + sqlfence.SQLite.String(); got != "postgres sqlite" {
		t.Errorf("dialect names %q", got)
	}
}
