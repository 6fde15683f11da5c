package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"regexp"

	"github.com/dlockdev/dlock"
)

// DefaultTable is the fence table's name unless Table says otherwise.
const DefaultTable = "dlock_fences"

// Guard records fencing tokens in one fence table of one database engine.
// A Guard is safe for concurrent use; it holds no connection.
type Guard struct {
	dialect Dialect
	table   string
	err     error // a bad option, returned by every call
}

// Option configures a Guard.
type Option func(*Guard)

// Table names the fence table (default DefaultTable): letters, digits and
// underscores, optionally qualified by a schema ("ops.fences"; on SQLite,
// an attached database's name; on MySQL, a database's). The name goes into the statements
// unquoted, so the database folds its case as it does for any unquoted
// name, and it must not be a reserved word; any other name is dlock.ErrInvalidFence,
// returned by every call of the Guard.
func Table(name string) Option {
	return func(g *Guard) {
		if !tableName.MatchString(name) {
			g.err = fmt.Errorf("%w: table name %q: want letters, digits and _, optionally schema.table", dlock.ErrInvalidFence, name)
			return
		}
		g.table = name
	}
}

// tableName is what Table accepts: names that need no quoting in any of the
// dialects, so that they can be put into the statements as they are.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// New returns a Guard for the dialect's database.
func New(d Dialect, opts ...Option) *Guard {
	g := &Guard{dialect: d, table: DefaultTable}
	if d.record == nil {
		g.err = fmt.Errorf("%w: zero Dialect: use sqlfence.Postgres, sqlfence.SQLite or sqlfence.MySQL", dlock.ErrInvalidFence)
	}
	for _, o := range opts {
		o(g)
	}
	return g
}

// CreateStatement returns the statement that creates the fence table if it
// does not exist, for a migration tool. It returns "" for a Guard made with
// a bad option or the zero Dialect, whose calls return dlock.ErrInvalidFence: a
// statement naming the default table instead of the one asked for would
// create the wrong table.
func (g *Guard) CreateStatement() string {
	if g.err != nil {
		return ""
	}
	return fmt.Sprintf(g.dialect.create, g.table)
}

// CreateTable creates the fence table if it does not exist.
func (g *Guard) CreateTable(ctx context.Context, db *sql.DB) error {
	if g.err != nil {
		return g.err
	}
	if db == nil {
		return fmt.Errorf("%w: nil *sql.DB", dlock.ErrInvalidFence)
	}
	if _, err := db.ExecContext(ctx, g.CreateStatement()); err != nil {
		return fmt.Errorf("sqlfence: create table %s: %w", g.table, err)
	}
	return nil
}

// Check records token for the fence name in tx and holds the fence row until
// tx ends. It returns a *dlock.StaleTokenError (errors.Is(err,
// dlock.ErrStaleToken)) when a higher token is recorded already: the caller
// lost its lease and must roll tx back. The same token may be recorded again
// (one holder, several transactions). Call it first in the transaction,
// before the writes it guards.
func (g *Guard) Check(ctx context.Context, tx *sql.Tx, fence string, token uint64) error {
	if err := g.valid(fence, token); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("fence %q: %w: nil *sql.Tx", fence, dlock.ErrInvalidFence)
	}
	ok, higher, err := g.dialect.record.record(ctx, tx, g.table, fence, int64(token))
	switch {
	case err != nil:
		return fmt.Errorf("sqlfence: fence %q: record token %d in %s: %w", fence, token, g.table, err)
	case !ok:
		stale := &dlock.StaleTokenError{Fence: fence, Token: token}
		if higher > 0 {
			stale.Recorded = uint64(higher)
		}
		return stale
	}
	return nil
}

// Do runs fn in a transaction of db that Check has fenced, and commits it
// when fn returns nil; otherwise it rolls back and returns fn's error (or
// Check's *dlock.StaleTokenError, without calling fn).
func (g *Guard) Do(ctx context.Context, db *sql.DB, fence string, token uint64, fn func(tx *sql.Tx) error) error {
	if err := g.valid(fence, token); err != nil {
		return err
	}
	if db == nil || fn == nil {
		return fmt.Errorf("fence %q: %w: nil *sql.DB or function", fence, dlock.ErrInvalidFence)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlfence: fence %q: begin: %w", fence, err)
	}
	defer tx.Rollback() // after Commit, a no-op
	if err := g.Check(ctx, tx, fence, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlfence: fence %q: commit: %w", fence, err)
	}
	return nil
}

// valid checks what Check is given, before anything is sent.
func (g *Guard) valid(fence string, token uint64) error {
	switch {
	case g.err != nil:
		return g.err
	case fence == "":
		return fmt.Errorf("%w: empty fence name", dlock.ErrInvalidFence)
	case g.dialect.maxName > 0 && len(fence) > g.dialect.maxName:
		return fmt.Errorf("fence %.40q…: %w: name of %d bytes, longer than %s's %d", fence, dlock.ErrInvalidFence, len(fence), g.dialect, g.dialect.maxName)
	case token == 0:
		return fmt.Errorf("fence %q: %w: token 0 is no lease's token", fence, dlock.ErrInvalidFence)
	case token > math.MaxInt64:
		// SQL's BIGINT is signed; no backend's tokens get near it.
		return fmt.Errorf("fence %q: %w: token %d does not fit a BIGINT", fence, dlock.ErrInvalidFence, token)
	}
	return nil
}
