package storetest_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/dlockdev/dlock/sqlfence"
)

func init() { roles["holder"] = frozenHolder }

// writeJob sets the job's row to v in tx: the protected write.
func writeJob(ctx context.Context, s store, tx *sql.Tx, v string) error {
	_, err := tx.ExecContext(ctx, s.q("UPDATE data SET v = $1 WHERE k = 'job'"), v)
	return err
}

// frozenHolder is the child of the proofs: it opens its own database
// handle and its own dlock client on the test's redis-server, locks KEY
// with a one-second TTL, says its token, and waits for "write" (the parent
// freezes it meanwhile, past the TTL). Then it writes "A" at once, as a
// holder that did not notice it lost the lease: through Guard.Do with its
// token when GUARD=on, with a plain transaction otherwise; and it reports
// "result stale", "result ok" or "result err …".
func frozenHolder(ctx context.Context, p *testproc.Peer) error {
	s, err := storeNamed(p.Env("STORE"))
	if err != nil {
		return err
	}
	db, err := sql.Open(s.driver, p.Env("DSN"))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil { // connect before the freeze
		return err
	}
	client, err := redisdlock.Open(ctx, p.Env("REDIS"))
	if err != nil {
		return err
	}
	defer client.Close()
	lease, err := client.Lock(ctx, p.Env("KEY"), dlock.WithTTL(time.Second))
	if err != nil {
		return err
	}
	p.Say("token %d", lease.Token())
	if err := p.Await("write"); err != nil {
		return err
	}
	write := func(tx *sql.Tx) error { return writeJob(ctx, s, tx, "A") }
	if p.Env("GUARD") == "on" {
		err = sqlfence.New(s.dialect).Do(ctx, db, "job", lease.Token(), write)
	} else {
		err = plainTx(ctx, db, write)
	}
	switch {
	case errors.Is(err, dlock.ErrStaleToken):
		p.Say("result stale")
	case err == nil:
		p.Say("result ok")
	default:
		p.Say("result err %v", err)
	}
	return nil
}

// plainTx runs fn in a transaction without a fence: the write path that
// does not call Check.
func plainTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// TestFence_frozenHolderRejected is the frozen-holder proof on each store:
// a holder frozen (SIGSTOP) past its lease's TTL, whose lock a second
// holder then takes and writes "B" under, wakes and writes "A" through the
// guard with its old token: the write is refused as stale and the row holds
// "B".
func TestFence_frozenHolderRejected(t *testing.T) {
	each(t, func(t *testing.T, s store) { frozenHolderProof(t, s, true) })
}

// TestFence_noGuard_staleWriteLands is the negative control: the same
// flow with the frozen holder's write made without Check. Its write lands
// and the row holds "A", the lost update the guard is there to stop: so
// TestFence_frozenHolderRejected would catch a guard that let it through.
func TestFence_noGuard_staleWriteLands(t *testing.T) {
	each(t, func(t *testing.T, s store) { frozenHolderProof(t, s, false) })
}

func frozenHolderProof(t *testing.T, s store, guard bool) {
	ctx := ctxT(t)
	dsn := s.newDSN(t)
	db := s.open(t, dsn)
	g := sqlfence.New(s.dialect)
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	s.exec(t, db, "CREATE TABLE data (k VARCHAR(64) PRIMARY KEY, v TEXT NOT NULL)")
	s.exec(t, db, "INSERT INTO data VALUES ('job', 'none')")
	redis := testserver.StartRedis(t)
	mode := "off"
	if guard {
		mode = "on"
	}

	a := testproc.Start(t, "holder", "STORE="+s.name, "DSN="+dsn, "REDIS="+redis.URL(), "KEY=job", "GUARD="+mode)
	tokenA, err := strconv.ParseUint(a.Expect(t, "token"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	a.Freeze(t)

	client, err := redisdlock.Open(ctx, redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// Lock waits until A's lease has run out on the server: A, frozen,
	// cannot renew it.
	lease, err := client.Lock(ctx, "job", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	if lease.Token() <= tokenA {
		t.Fatalf("B's token %d is not above A's %d", lease.Token(), tokenA)
	}
	if err := g.Do(ctx, db, "job", lease.Token(), func(tx *sql.Tx) error { return writeJob(ctx, s, tx, "B") }); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	a.Thaw(t)
	a.Tell(t, "write")
	result := a.Expect(t, "result")
	a.Wait(t)
	var v string
	if err := db.QueryRowContext(ctx, "SELECT v FROM data WHERE k = 'job'").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if guard {
		if result != "stale" || v != "B" {
			t.Fatalf("frozen holder (token %d) through the guard after B (token %d): result %q, row %q; want stale and B", tokenA, lease.Token(), result, v)
		}
		if got := recorded(t, s, db, sqlfence.DefaultTable, "job"); got != lease.Token() {
			t.Fatalf("recorded %d, want B's %d", got, lease.Token())
		}
		return
	}
	if result != "ok" || v != "A" {
		t.Fatalf("frozen holder without the guard: result %q, row %q; want ok and A (the stale write landing)", result, v)
	}
}
