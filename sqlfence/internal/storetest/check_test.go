package storetest_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/sqlfence"
)

// check runs Check for token in a transaction of its own and commits it
// when Check succeeds; it returns Check's error.
func check(t *testing.T, g *sqlfence.Guard, db *sql.DB, fence string, token uint64) error {
	t.Helper()
	ctx := ctxT(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := g.Check(ctx, tx, fence, token); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return nil
}

// wantStale fails t unless err is the *dlock.StaleTokenError of token
// refused by recorded on fence.
func wantStale(t *testing.T, err error, fence string, token, rec uint64) {
	t.Helper()
	if !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("err = %v, want errors.Is(err, dlock.ErrStaleToken)", err)
	}
	var se *dlock.StaleTokenError
	if !errors.As(err, &se) {
		t.Fatalf("err = %T %v, want a *dlock.StaleTokenError", err, err)
	}
	if want := (dlock.StaleTokenError{Fence: fence, Token: token, Recorded: rec}); *se != want {
		t.Fatalf("StaleTokenError = %+v, want %+v", *se, want)
	}
}

// TestCheck_recordsTokens: the first Check of a fence records its token; the
// same token again and a higher one are accepted (and the higher one
// recorded); a lower one is refused with a *dlock.StaleTokenError that
// names the recorded token, and leaves the record as it was. Fences are
// independent of each other.
func TestCheck_recordsTokens(t *testing.T) {
	each(t, func(t *testing.T, s store) {
		db := s.newDB(t)
		g := sqlfence.New(s.dialect)
		if err := g.CreateTable(ctxT(t), db); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			token uint64
			stale bool
			after uint64 // the recorded token afterwards
		}{
			{token: 5, after: 5},
			{token: 5, after: 5},
			{token: 7, after: 7},
			{token: 6, stale: true, after: 7},
			{token: 1, stale: true, after: 7},
			{token: 7, after: 7},
			{token: math.MaxInt64, after: math.MaxInt64},
			{token: 8, stale: true, after: math.MaxInt64},
		}
		for _, st := range steps {
			err := check(t, g, db, "orders", st.token)
			if st.stale {
				wantStale(t, err, "orders", st.token, st.after)
			} else if err != nil {
				t.Fatalf("Check(%d): %v", st.token, err)
			}
			if got := recorded(t, s, db, sqlfence.DefaultTable, "orders"); got != st.after {
				t.Fatalf("after Check(%d): recorded %d, want %d", st.token, got, st.after)
			}
		}
		// Another fence starts from nothing.
		if err := check(t, g, db, "invoices", 1); err != nil {
			t.Fatalf("Check(invoices, 1): %v", err)
		}
		if got := recorded(t, s, db, sqlfence.DefaultTable, "invoices"); got != 1 {
			t.Fatalf("invoices: recorded %d, want 1", got)
		}
	})
}

// TestDo_staleDoesNotRun: Do commits fn's writes with the token; a stale
// Do returns the *dlock.StaleTokenError without calling fn, and the data
// and the record are unchanged; an error of fn rolls back fn's writes and
// the token, and comes back as it was.
func TestDo_staleDoesNotRun(t *testing.T) {
	each(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		db := s.newDB(t)
		g := sqlfence.New(s.dialect)
		if err := g.CreateTable(ctx, db); err != nil {
			t.Fatal(err)
		}
		s.exec(t, db, "CREATE TABLE data (k VARCHAR(64) PRIMARY KEY, v TEXT NOT NULL)")
		s.exec(t, db, "INSERT INTO data VALUES ('job', 'none')")
		write := func(v string) func(tx *sql.Tx) error {
			return func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, s.q("UPDATE data SET v = $1 WHERE k = 'job'"), v)
				return err
			}
		}
		value := func() string {
			var v string
			if err := db.QueryRow("SELECT v FROM data WHERE k = 'job'").Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}

		if err := g.Do(ctx, db, "job", 42, write("42")); err != nil {
			t.Fatalf("Do(42): %v", err)
		}
		called := false
		err := g.Do(ctx, db, "job", 41, func(tx *sql.Tx) error { called = true; return write("41")(tx) })
		wantStale(t, err, "job", 41, 42)
		if called {
			t.Fatal("a stale Do called its function")
		}
		if v := value(); v != "42" {
			t.Fatalf("after a stale Do, data = %q, want 42", v)
		}

		boom := errors.New("boom")
		err = g.Do(ctx, db, "job", 43, func(tx *sql.Tx) error {
			if err := write("43")(tx); err != nil {
				return err
			}
			return boom
		})
		if err != boom {
			t.Fatalf("Do whose function failed: %v, want the function's error as it is", err)
		}
		if v, r := value(), recorded(t, s, db, sqlfence.DefaultTable, "job"); v != "42" || r != 42 {
			t.Fatalf("after a failed function: data %q, recorded %d, want 42 and 42 (rolled back)", v, r)
		}
	})
}

// TestInvalid: every bad input returns dlock.ErrInvalidFence naming the problem and
// leaves the database as it was: no fence table created, no row written.
func TestInvalid(t *testing.T) {
	each(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		db := s.newDB(t)
		noop := func(*sql.Tx) error { return nil }

		// A bad Guard creates nothing.
		for _, bad := range []struct {
			name string
			g    *sqlfence.Guard
			want string
		}{
			{"zero Dialect", sqlfence.New(sqlfence.Dialect{}), "zero Dialect"},
			{"empty table", sqlfence.New(s.dialect, sqlfence.Table("")), `table name ""`},
			{"injection", sqlfence.New(s.dialect, sqlfence.Table("f; DROP TABLE x")), "table name"},
			{"quote", sqlfence.New(s.dialect, sqlfence.Table(`f"`)), "table name"},
			{"three parts", sqlfence.New(s.dialect, sqlfence.Table("a.b.c")), "table name"},
			{"leading digit", sqlfence.New(s.dialect, sqlfence.Table("1fences")), "table name"},
			{"too long", sqlfence.New(s.dialect, sqlfence.Table(strings.Repeat("f", 64))), "table name"},
		} {
			if st := bad.g.CreateStatement(); st != "" {
				t.Errorf("%s: CreateStatement = %q, want \"\"", bad.name, st)
			}
			errs := map[string]error{
				"CreateTable": bad.g.CreateTable(ctx, db),
				"Do":          bad.g.Do(ctx, db, "f", 1, noop),
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			errs["Check"] = bad.g.Check(ctx, tx, "f", 1)
			_ = tx.Rollback()
			for op, err := range errs {
				if !errors.Is(err, dlock.ErrInvalidFence) || !strings.Contains(err.Error(), bad.want) {
					t.Errorf("%s: %s: %v, want dlock.ErrInvalidFence saying %q", bad.name, op, err, bad.want)
				}
			}
		}
		if got := tables(t, s, db); len(got) != 0 {
			t.Fatalf("bad Guards created tables %v", got)
		}

		// Bad arguments to a good Guard write nothing.
		g := sqlfence.New(s.dialect)
		if err := g.CreateTable(ctx, db); err != nil {
			t.Fatal(err)
		}
		if err := check(t, g, db, "f", 3); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []struct {
			name  string
			fence string
			token uint64
			want  string
		}{
			{"empty fence", "", 9, "empty fence name"},
			{"token 0", "f", 0, "token 0"},
			{"token 0, new fence", "g", 0, "token 0"},
			{"token > MaxInt64", "f", math.MaxInt64 + 1, "does not fit"},
			{"token max uint64", "g", math.MaxUint64, "does not fit"},
		} {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			errCheck := g.Check(ctx, tx, bad.fence, bad.token)
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			called := false
			errDo := g.Do(ctx, db, bad.fence, bad.token, func(*sql.Tx) error { called = true; return nil })
			for op, err := range map[string]error{"Check": errCheck, "Do": errDo} {
				if !errors.Is(err, dlock.ErrInvalidFence) || !strings.Contains(err.Error(), bad.want) {
					t.Errorf("%s: %s: %v, want dlock.ErrInvalidFence saying %q", bad.name, op, err, bad.want)
				}
			}
			if called {
				t.Errorf("%s: Do called its function", bad.name)
			}
		}
		for op, err := range map[string]error{
			"Check(nil tx)":    g.Check(ctx, nil, "f", 4),
			"Do(nil db)":       g.Do(ctx, nil, "f", 4, noop),
			"Do(nil fn)":       g.Do(ctx, db, "f", 4, nil),
			"CreateTable(nil)": g.CreateTable(ctx, nil),
		} {
			if !errors.Is(err, dlock.ErrInvalidFence) {
				t.Errorf("%s: %v, want dlock.ErrInvalidFence", op, err)
			}
		}
		// The table holds what it held: fence f at 3, nothing else.
		rows, err := db.Query("SELECT name, token FROM " + sqlfence.DefaultTable)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var name string
			var token int64
			if err := rows.Scan(&name, &token); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s=%d", name, token))
		}
		if want := []string{"f=3"}; !slices.Equal(got, want) {
			t.Fatalf("fence table after bad input: %q, want %q", got, want)
		}
	})
}

// TestCreateTable: the statement is the documented one, names the table it
// was given (schema-qualified too), and CreateTable may run again; a Check
// before the table exists fails with the database's error, not as stale.
func TestCreateTable(t *testing.T) {
	each(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		db := s.newDB(t)
		table := "main.job_fences"
		switch s.name {
		case "postgres":
			s.exec(t, db, "CREATE SCHEMA ops")
			table = "ops.job_fences"
		case "mariadb": // a schema is a database: the test's own
			var name string
			if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
				t.Fatal(err)
			}
			table = name + ".job_fences"
		}
		g := sqlfence.New(s.dialect, sqlfence.Table(table))
		if st := g.CreateStatement(); !strings.HasPrefix(st, "CREATE TABLE IF NOT EXISTS "+table+" (") {
			t.Fatalf("CreateStatement = %q", st)
		}

		err := check(t, g, db, "f", 1)
		if err == nil || errors.Is(err, dlock.ErrStaleToken) || errors.Is(err, dlock.ErrInvalidFence) {
			t.Fatalf("Check without the table: %v, want the database's error", err)
		}
		for range 2 {
			if err := g.CreateTable(ctx, db); err != nil {
				t.Fatal(err)
			}
		}
		if err := check(t, g, db, "f", 2); err != nil {
			t.Fatal(err)
		}
		if got := recorded(t, s, db, table, "f"); got != 2 {
			t.Fatalf("recorded %d in %s, want 2", got, table)
		}
	})
}
