package demo

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// sqlitePlay is the demo's fault in miniature on the SQLite store: holder
// 10 reads order 1 (and is frozen), holder 11 reads and closes it, holder
// 10 closes it with its old token. It returns that close's error and the
// refunds per order.
func sqlitePlay(t *testing.T, fencing bool) (refunds map[int]int, staleErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "orders.db")
	if err := CreateOrderDB(ctx, path, 1); err != nil {
		t.Fatal(err)
	}
	if err := CreateOrderDB(ctx, path, 1); err == nil {
		t.Fatal("CreateOrderDB of an existing file: no error")
	}
	a, err := openOrderDB(path, fencing)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openOrderDB(path, fencing)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if o, err := a.next(ctx, 10); o != 1 || err != nil {
		t.Fatalf("A's read: %d, %v; want order 1", o, err)
	}
	if o, err := b.next(ctx, 11); o != 1 || err != nil {
		t.Fatalf("B's read: %d, %v; want order 1 (still open)", o, err)
	}
	if err := b.close(ctx, 11, 1, "B"); err != nil {
		t.Fatalf("B's close: %v", err)
	}
	staleErr = a.close(ctx, 10, 1, "A")
	if o, err := b.next(ctx, 11); o != 0 || err != nil {
		t.Fatalf("read after the close: %d, %v; want no order", o, err)
	}
	refunds, err = RefundsIn(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	return refunds, staleErr
}

func TestOrderDB_close_staleTokenRefusedByTheDatabase(t *testing.T) {
	refunds, err := sqlitePlay(t, true)
	var stale *dlock.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 10 || stale.Recorded != 11 {
		t.Errorf("A's stale close: %v, want a *dlock.StaleTokenError of 10, 11 recorded", err)
	}
	if refunds[1] != 1 {
		t.Errorf("order 1 refunded %d times, want once", refunds[1])
	}
}

func TestOrderDB_close_noFencing_paysTwice(t *testing.T) {
	refunds, err := sqlitePlay(t, false)
	if err != nil {
		t.Errorf("A's stale close without fencing: %v, want accepted", err)
	}
	if refunds[1] != 2 {
		t.Errorf("order 1 refunded %d times, want twice: the negative control", refunds[1])
	}
}
