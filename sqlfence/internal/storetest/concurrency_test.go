package storetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/dlockdev/dlock/sqlfence"
)

// The concurrency checker: many holders write through the guard at once,
// and a witness of the commit order that does not depend on the guard lets
// a checker confirm that no write with an older token committed after one
// with a newer token.
//
// The witness: every writing transaction ends with
//
//	UPDATE commit_order SET n = n + 1 WHERE id = 1 RETURNING n
//	INSERT INTO history (n, token, writer) VALUES (n, token, writer)
//
// The UPDATE takes commit_order's row lock (PostgreSQL) or the database's
// write lock (SQLite) and keeps it until the transaction ends, so the next
// transaction's UPDATE reads the committed n: n counts the commits in
// order. A transaction that rolls back leaves no history row and its n is
// reused, so committed transactions have n = 1, 2, 3, … with no gaps.
// MySQL has no UPDATE … RETURNING: there the transaction reads n back
// after its UPDATE, which it sees (its own write) and holds locked.

// entry is one committed write, as history has it.
type entry struct {
	n      int64
	token  uint64
	writer string
}

// refusal is one write that the guard refused.
type refusal struct {
	token, recorded uint64
	writer          string
}

// createWitness makes the witness's tables.
func createWitness(t testing.TB, s store, db *sql.DB) {
	t.Helper()
	s.exec(t, db, "CREATE TABLE commit_order (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)")
	s.exec(t, db, "INSERT INTO commit_order VALUES (1, 0)")
	s.exec(t, db, "CREATE TABLE history (n BIGINT PRIMARY KEY, token BIGINT NOT NULL, writer TEXT NOT NULL)")
}

// witness is a writing transaction's last statements.
func witness(ctx context.Context, s store, tx *sql.Tx, token uint64, writer string) error {
	var n int64
	if s.dialect == sqlfence.MySQL {
		if _, err := tx.ExecContext(ctx, "UPDATE commit_order SET n = n + 1 WHERE id = 1"); err != nil {
			return fmt.Errorf("witness: %w", err)
		}
		if err := tx.QueryRowContext(ctx, "SELECT n FROM commit_order WHERE id = 1").Scan(&n); err != nil {
			return fmt.Errorf("witness: %w", err)
		}
	} else if err := tx.QueryRowContext(ctx, "UPDATE commit_order SET n = n + 1 WHERE id = 1 RETURNING n").Scan(&n); err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	_, err := tx.ExecContext(ctx, s.q("INSERT INTO history (n, token, writer) VALUES ($1, $2, $3)"), n, int64(token), writer)
	return err
}

// readHistory returns the committed writes in commit order.
func readHistory(t testing.TB, s store, db *sql.DB) []entry {
	t.Helper()
	rows, err := db.Query("SELECT n, token, writer FROM history ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var h []entry
	for rows.Next() {
		var e entry
		var token int64
		if err := rows.Scan(&e.n, &token, &e.writer); err != nil {
			t.Fatal(err)
		}
		e.token = uint64(token)
		h = append(h, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return h
}

// checkHistory is the checker. Given the committed writes in commit order
// and the refused ones, it returns an error unless
//   - the commits are numbered 1, 2, 3, … (the witness is sound);
//   - their tokens never decrease in commit order: no write with an older
//     token committed after one with a newer token, so the recorded token
//     order is the commit order;
//   - every refused write's token is below the token the guard named as
//     recorded, and that token is one a committed write carried: it was
//     refused for a newer holder's write that really committed.
func checkHistory(h []entry, refused []refusal) error {
	var errs []error
	committed := map[uint64]bool{}
	for i, e := range h {
		if e.n != int64(i+1) {
			errs = append(errs, fmt.Errorf("commit %d has n = %d: the witness is broken", i+1, e.n))
		}
		if i > 0 && e.token < h[i-1].token {
			errs = append(errs, fmt.Errorf("commit %d (%s) carries token %d after commit %d (%s) with token %d: an older token committed after a newer one",
				e.n, e.writer, e.token, h[i-1].n, h[i-1].writer, h[i-1].token))
		}
		committed[e.token] = true
	}
	for _, r := range refused {
		switch {
		case r.recorded <= r.token:
			errs = append(errs, fmt.Errorf("%s's token %d was refused for recorded token %d, which is not newer", r.writer, r.token, r.recorded))
		case !committed[r.recorded]:
			errs = append(errs, fmt.Errorf("%s's token %d was refused for token %d, which no committed write carries", r.writer, r.token, r.recorded))
		}
	}
	return errors.Join(errs...)
}

// tally collects what the writers saw.
type tally struct {
	mu       sync.Mutex
	ok       int
	refused  []refusal
	failures []error
}

// guardedWrite writes through the guard, with the witness, and counts the
// outcome.
func (ty *tally) guardedWrite(ctx context.Context, s store, g *sqlfence.Guard, db *sql.DB, fence string, token uint64, writer string) {
	err := g.Do(ctx, db, fence, token, func(tx *sql.Tx) error { return witness(ctx, s, tx, token, writer) })
	ty.mu.Lock()
	defer ty.mu.Unlock()
	var stale *dlock.StaleTokenError
	switch {
	case err == nil:
		ty.ok++
	case errors.As(err, &stale):
		ty.refused = append(ty.refused, refusal{token: token, recorded: stale.Recorded, writer: writer})
	default:
		ty.failures = append(ty.failures, fmt.Errorf("%s, token %d: %w", writer, token, err))
	}
}

// TestConcurrency_guardedWritesInTokenOrder: holders of a semaphore's
// permits (limit 4, 12 holders, each its own dlock client) and of the
// successive leases of one lock (8 holders) write through the guard under
// load, each also writing once more with its token after it released it
// (a holder whose lease has passed on), and one laggard at the end with
// the first token it had. The checker confirms the commit order is the
// token order and every refusal was for a newer committed token; every
// successful Do is in the history and nothing else is.
func TestConcurrency_guardedWritesInTokenOrder(t *testing.T) {
	each(t, func(t *testing.T, s store) {
		redis := testserver.StartRedis(t)
		for _, w := range []struct {
			name    string
			holders int
			acquire func(c *dlock.Client) func(context.Context) (*dlock.Lease, error)
		}{
			{"semaphore", 12, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
				sem := c.Semaphore("sem", 4)
				return func(ctx context.Context) (*dlock.Lease, error) {
					return sem.Acquire(ctx, dlock.WithTTL(30*time.Second))
				}
			}},
			{"lock", 8, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
				return func(ctx context.Context) (*dlock.Lease, error) {
					return c.Lock(ctx, "job", dlock.WithTTL(30*time.Second))
				}
			}},
		} {
			t.Run(w.name, func(t *testing.T) {
				runConcurrency(t, s, redis.URL(), w.holders, w.acquire)
			})
		}
	})
}

func runConcurrency(t *testing.T, s store, redisURL string, holders int, acquire func(*dlock.Client) func(context.Context) (*dlock.Lease, error)) {
	const rounds = 4
	ctx, cancel := context.WithTimeout(ctxT(t), 90*time.Second)
	defer cancel()
	db := s.newDB(t)
	db.SetMaxOpenConns(holders + 2)
	g := sqlfence.New(s.dialect)
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	createWitness(t, s, db)

	var ty tally
	var wg sync.WaitGroup
	firsts := make([]uint64, holders)
	for h := range holders {
		client, err := redisdlock.Open(ctx, redisURL)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		take := acquire(client)
		wg.Go(func() {
			writer := fmt.Sprintf("holder %d", h)
			for r := range rounds {
				lease, err := take(ctx)
				if err != nil {
					ty.mu.Lock()
					ty.failures = append(ty.failures, fmt.Errorf("%s: %w", writer, err))
					ty.mu.Unlock()
					return
				}
				token := lease.Token()
				if r == 0 {
					firsts[h] = token
				}
				ty.guardedWrite(ctx, s, g, db, "fence", token, writer)
				ty.guardedWrite(ctx, s, g, db, "fence", token, writer) // the same holder again
				_ = lease.Unlock(ctx)
				// The lease has passed on; this holder writes once more
				// with it, as one that missed the loss would. Accepted only
				// when no newer token has committed yet.
				ty.guardedWrite(ctx, s, g, db, "fence", token, writer+" after unlock")
			}
		})
	}
	wg.Wait()
	// The laggard: every holder's first token, now long surpassed.
	laggard := slices.Min(firsts)
	ty.guardedWrite(ctx, s, g, db, "fence", laggard, "laggard")

	if len(ty.failures) > 0 {
		t.Fatalf("writes failed other than stale: %v", errors.Join(ty.failures...))
	}
	h := readHistory(t, s, db)
	if err := checkHistory(h, ty.refused); err != nil {
		t.Fatalf("checker: %v", err)
	}
	if len(h) != ty.ok {
		t.Fatalf("history has %d commits, the writers saw %d", len(h), ty.ok)
	}
	if len(ty.refused) == 0 || ty.refused[len(ty.refused)-1].writer != "laggard" {
		t.Fatalf("the laggard (token %d) was not refused", laggard)
	}
	if want := h[len(h)-1].token; recorded(t, s, db, sqlfence.DefaultTable, "fence") != want {
		t.Fatalf("recorded token is not the last commit's %d", want)
	}
	t.Logf("%d commits, %d refused, tokens %d…%d", len(h), len(ty.refused), h[0].token, h[len(h)-1].token)
}

// TestChecker_flagsUnfencedReorder is the checker's negative control on
// each store: holder 5 got its token, paused before its transaction, and
// holder 6 committed meanwhile; then 5 commits. Without Check, the
// checker flags the history (an older token committed after a newer one);
// through the guard, 5 is refused and the checker accepts the history.
func TestChecker_flagsUnfencedReorder(t *testing.T) {
	each(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		for _, guarded := range []bool{false, true} {
			db := s.newDB(t)
			g := sqlfence.New(s.dialect)
			if err := g.CreateTable(ctx, db); err != nil {
				t.Fatal(err)
			}
			createWitness(t, s, db)
			var ty tally
			write := func(token uint64) {
				writer := fmt.Sprintf("holder %d", token)
				if guarded {
					ty.guardedWrite(ctx, s, g, db, "fence", token, writer)
					return
				}
				if err := plainTx(ctx, db, func(tx *sql.Tx) error { return witness(ctx, s, tx, token, writer) }); err != nil {
					t.Fatal(err)
				}
			}
			write(6)
			write(5)
			err := checkHistory(readHistory(t, s, db), ty.refused)
			switch {
			case guarded && err != nil:
				t.Fatalf("guarded: checker: %v", err)
			case guarded && (len(ty.refused) != 1 || ty.refused[0].token != 5):
				t.Fatalf("guarded: refused %v, want token 5", ty.refused)
			case !guarded && (err == nil || !strings.Contains(err.Error(), "an older token committed after a newer one")):
				t.Fatalf("unguarded: checker: %v, want it to flag token 5 after 6", err)
			}
		}
	})
}

// TestChecker_flagsBadRefusals: the checker's rules for refusals, on
// made-up histories: a refusal for a token no commit carried, or for one
// not newer, is flagged; a gap in n is flagged.
func TestChecker_flagsBadRefusals(t *testing.T) {
	h := []entry{{1, 3, "a"}, {2, 5, "b"}}
	for _, c := range []struct {
		h       []entry
		refused []refusal
		want    string // "" for no error
	}{
		{h, []refusal{{4, 5, "x"}}, ""},
		{h, []refusal{{4, 7, "x"}}, "which no committed write carries"},
		{h, []refusal{{5, 5, "x"}}, "which is not newer"},
		{[]entry{{1, 3, "a"}, {3, 5, "b"}}, nil, "the witness is broken"},
	} {
		err := checkHistory(c.h, c.refused)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("checkHistory(%v, %v) = %v, want %q", c.h, c.refused, err, c.want)
		}
	}
}
