package storetest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dlockdev/dlock/sqlfence"
)

// closeOrder is the per-row variant of docs/fencing.md, section SQL, as a user
// writes it: the protected table has a fence column, and the write itself
// carries the condition, so a stale holder's UPDATE matches no row. It
// returns whether the write was applied.
func closeOrder(ctx context.Context, s store, db *sql.DB, id int, state string, token uint64) (bool, error) {
	var query string
	var args []any
	if s.dialect == sqlfence.MySQL {
		// MySQL's placeholders have no numbers; the documented statement.
		query, args = "UPDATE orders SET state = ?, fence = ? WHERE id = ? AND fence <= ?", []any{state, int64(token), id, int64(token)}
	} else {
		query, args = s.q("UPDATE orders SET state = $3, fence = $2 WHERE id = $1 AND fence <= $2"), []any{id, int64(token), state}
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// TestPerRow_fenceColumn: the documented per-row statement applies a
// holder's write, applies the same token again (one holder, several
// writes, the same write twice too), refuses an older token (0 rows
// affected, the row unchanged), and leaves other rows to their own fences.
//
// On MySQL, rows affected counts the rows changed, not matched, unless the
// connection sets CLIENT_FOUND_ROWS (go-sql-driver/mysql:
// clientFoundRows=true): the same write twice would read as stale. The
// test runs with it, as docs/fencing.md, section SQL says to, and pins the
// difference without it.
func TestPerRow_fenceColumn(t *testing.T) {
	each(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		dsn := s.newDSN(t)
		if s.dialect == sqlfence.MySQL {
			plain := s.open(t, dsn)
			s.exec(t, plain, "CREATE TABLE orders (id BIGINT PRIMARY KEY, state TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)")
			s.exec(t, plain, "INSERT INTO orders (id, state) VALUES (1, 'open')")
			for i, want := range []bool{true, false} {
				applied, err := closeOrder(ctx, s, plain, 1, "closed", 7)
				if err != nil {
					t.Fatal(err)
				}
				if applied != want {
					t.Fatalf("without clientFoundRows, write %d: applied %v, want %v (rows changed, not matched)", i+1, applied, want)
				}
			}
			s.exec(t, plain, "DROP TABLE orders")
			dsn += "?clientFoundRows=true"
		}
		db := s.open(t, dsn)
		s.exec(t, db, "CREATE TABLE orders (id BIGINT PRIMARY KEY, state TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)")
		s.exec(t, db, "INSERT INTO orders (id, state) VALUES (1, 'open'), (2, 'open')")
		row := func(id int) (string, int64) {
			var state string
			var fence int64
			if err := db.QueryRowContext(ctx, s.q("SELECT state, fence FROM orders WHERE id = $1"), id).Scan(&state, &fence); err != nil {
				t.Fatal(err)
			}
			return state, fence
		}
		for _, st := range []struct {
			id      int
			state   string
			token   uint64
			applied bool
		}{
			{1, "closing", 7, true},
			{1, "closed", 7, true},    // the same holder again
			{1, "closed", 7, true},    // the same write again
			{1, "reopened", 5, false}, // a stale holder
			{2, "closed", 5, true},    // another row: its own fence
			{1, "archived", 8, true},  // a newer holder
			{1, "closed", 7, false},   // the old holder once more
		} {
			applied, err := closeOrder(ctx, s, db, st.id, st.state, st.token)
			if err != nil {
				t.Fatal(err)
			}
			if applied != st.applied {
				t.Fatalf("order %d → %s with token %d: applied %v, want %v", st.id, st.state, st.token, applied, st.applied)
			}
		}
		if state, fence := row(1); state != "archived" || fence != 8 {
			t.Fatalf("order 1: %s, fence %d, want archived, 8", state, fence)
		}
		if state, fence := row(2); state != "closed" || fence != 5 {
			t.Fatalf("order 2: %s, fence %d, want closed, 5", state, fence)
		}
	})
}
