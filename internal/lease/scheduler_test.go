package lease

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/fakeclock"
)

// fakeClock is a fake clock the Scheduler can run on.
type fakeClock struct{ *fakeclock.Clock }

func newFakeClock() *fakeClock {
	return &fakeClock{fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) timer { return c.Clock.AfterFunc(d, f) }

// batchGrant is a grant of a batchRenewer; only the batch renews it.
type batchGrant struct {
	id        int
	validFrom time.Time
	validity  time.Duration
}

func (g *batchGrant) Token() uint64                 { return uint64(g.id) }
func (g *batchGrant) ValidFrom() time.Time          { return g.validFrom }
func (g *batchGrant) Validity() time.Duration       { return g.validity }
func (g *batchGrant) Lost() <-chan error            { return nil }
func (g *batchGrant) Renew(context.Context) error   { return errors.New("renewed alone, not in a batch") }
func (g *batchGrant) Release(context.Context) error { return nil }

// batchRenewer records its batches and answers as the test says.
type batchRenewer struct {
	clk *fakeClock

	mu      sync.Mutex
	batches []batch
	fail    map[int]error // a grant's error, by id
	entered chan struct{} // if set, told of each batch, which then waits
	gate    chan struct{} // for gate or its ctx
}

type batch struct {
	at  time.Time
	ids []int
}

func (r *batchRenewer) RenewBatch(ctx context.Context, grants []driver.Grant) []error {
	r.mu.Lock()
	b := batch{at: r.clk.Now()}
	var errs []error
	for i, g := range grants {
		id := g.(*batchGrant).id
		b.ids = append(b.ids, id)
		if err := r.fail[id]; err != nil {
			if errs == nil {
				errs = make([]error, len(grants))
			}
			errs[i] = err
		}
	}
	r.batches = append(r.batches, b)
	entered, gate := r.entered, r.gate
	r.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			errs = make([]error, len(grants))
			for i := range errs {
				errs[i] = ctx.Err() // every grant's renewal unknown
			}
		}
	}
	return errs
}

func (r *batchRenewer) sent() []batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func newBatchScheduler() (*Scheduler, *batchRenewer, *fakeClock) {
	clk := newFakeClock()
	r := &batchRenewer{clk: clk, fail: map[int]error{}}
	return newScheduler(r, clk), r, clk
}

// startAt starts a lease granted now on s's clock.
func startAt(s *Scheduler, clk *fakeClock, id int, validity time.Duration) *Engine {
	return s.Start("k", &batchGrant{id: id, validFrom: clk.Now(), validity: validity}, nil, nil)
}

func TestScheduler_manyLeasesOneBatchPerInterval(t *testing.T) {
	s, r, clk := newBatchScheduler()
	const validity, n = 3 * time.Second, 1000
	interval := validity / 3
	engines := make([]*Engine, n)
	// Granted all through one renewal interval, as a busy client's are.
	for i := range engines {
		engines[i] = startAt(s, clk, i, validity)
		clk.Advance(interval / n)
	}
	const rounds = 10
	for range rounds {
		clk.Advance(interval)
	}
	batches := r.sent()
	// The leases fall in step within the first two ticks; from then on,
	// one batch renews them all.
	if len(batches) > rounds+2 {
		t.Errorf("%d batches in %d renewal intervals, want one per interval once in step", len(batches), rounds+1)
	}
	for _, b := range batches[2:] {
		if len(b.ids) != n {
			t.Fatalf("a batch renewed %d leases, want all %d", len(b.ids), n)
		}
	}
	last := batches[len(batches)-1].at
	for i, e := range engines {
		if err := e.Err(); err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		if got, want := e.Deadline(), e.deadlineFrom(last); !got.Equal(want) {
			t.Fatalf("lease %d: deadline %v, want a validity less the margins after the last batch was sent (%v)", i, got, want)
		}
	}
}

func TestScheduler_newLeaseRenewedNoLaterThanAlone(t *testing.T) {
	s, r, clk := newBatchScheduler()
	const validity = 3 * time.Second
	interval := validity / 3
	startAt(s, clk, 1, validity)
	clk.Advance(interval / 2)
	// Granted half an interval after 1: renewed with it, early.
	startAt(s, clk, 2, validity)
	clk.Advance(interval / 2)
	b := r.sent()
	if len(b) != 1 || !slices.Equal(b[0].ids, []int{1, 2}) {
		t.Fatalf("batches after one interval: %+v, want one of both leases", b)
	}
	// Granted by a request sent before the last tick (a slow reply): its
	// first renewal is due before the group's next tick, which it pulls
	// earlier.
	sentAt := clk.Now().Add(-interval / 4)
	e3 := s.Start("k", &batchGrant{id: 3, validFrom: sentAt, validity: validity}, nil, nil)
	clk.Advance(interval)
	b = r.sent()
	if len(b) < 2 {
		t.Fatalf("batches: %+v, want a second", b)
	}
	if due := sentAt.Add(interval); b[1].at.After(due) {
		t.Errorf("lease 3 first renewed at %v, after its own renewal was due (%v)", b[1].at, due)
	}
	if !slices.Contains(b[1].ids, 3) {
		t.Errorf("second batch %v without lease 3", b[1].ids)
	}
	// A lease granted by a request sent long before renews alone, not
	// the whole group with it.
	sentAt = clk.Now().Add(-interval * 9 / 10)
	s.Start("k", &batchGrant{id: 4, validFrom: sentAt, validity: validity}, nil, nil)
	clk.Advance(interval / 10)
	b = r.sent()
	if last := b[len(b)-1]; !slices.Equal(last.ids, []int{4}) || last.at.After(sentAt.Add(interval)) {
		t.Errorf("last batch %+v, want lease 4 alone, by %v", last, sentAt.Add(interval))
	}
	if err := e3.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestScheduler_leaseFailedInBatchEndsAlone(t *testing.T) {
	s, r, clk := newBatchScheduler()
	const validity = 3 * time.Second
	interval := validity / 3
	engines := make([]*Engine, 5)
	for i := range engines {
		engines[i] = startAt(s, clk, i, validity)
	}
	r.mu.Lock()
	r.fail[1] = driver.ErrNotHeld
	r.fail[3] = driver.ErrUnavailable // transient: retried until its deadline
	r.mu.Unlock()
	clk.Advance(interval)
	first := r.sent()[0].at

	if err := engines[1].Err(); !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("lease refused in the batch: Err = %v, want ErrLeaseLost", err)
	}
	if end, _, _ := engines[1].Ended(); end != Dropped {
		t.Errorf("lease refused in the batch ended as %v, want Dropped", end)
	}
	for _, i := range []int{0, 2, 4} {
		if err := engines[i].Err(); err != nil {
			t.Fatalf("lease %d renewed in the same batch: Err = %v", i, err)
		}
		if got, want := engines[i].Deadline(), engines[i].deadlineFrom(first); !got.Equal(want) {
			t.Errorf("lease %d: deadline %v, want %v", i, got, want)
		}
	}
	// The transient failure keeps its deadline from the grant and is
	// retried: the lease ends at that deadline, the others do not.
	granted := engines[3].deadlineFrom(clk.Now().Add(-interval))
	if got := engines[3].Deadline(); !got.Equal(granted) {
		t.Fatalf("lease with a transient failure: deadline %v, want still %v", got, granted)
	}
	clk.Advance(granted.Sub(clk.Now()))
	select {
	case <-engines[3].Done():
	default:
		t.Fatal("lease whose renewals kept failing not ended at its deadline")
	}
	if err := engines[3].Err(); !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", err)
	}
	for _, i := range []int{0, 2, 4} {
		if err := engines[i].Err(); err != nil {
			t.Fatalf("lease %d ended with the failed one: %v", i, err)
		}
	}
	retries := r.sent()[1:]
	if len(retries) == 0 || !slices.Equal(retries[0].ids, []int{3}) {
		t.Fatalf("batches after the first: %+v, want the failed lease retried alone", retries)
	}
	for _, b := range retries {
		if slices.Contains(b.ids, 1) {
			t.Fatalf("ended lease 1 renewed again in %v", b.ids)
		}
	}
}

func TestScheduler_deadlineEndsLeaseWhileBatchHangs(t *testing.T) {
	s, r, clk := newBatchScheduler()
	r.entered, r.gate = make(chan struct{}), make(chan struct{})
	const validity = 3 * time.Second
	e := startAt(s, clk, 1, validity)
	deadline := e.Deadline()
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		clk.Advance(validity / 3) // sends the batch, which hangs
	}()
	select {
	case <-r.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch sent (watchdog)")
	}
	clk.Advance(deadline.Sub(clk.Now()))
	select {
	case <-e.Done():
	default:
		t.Fatal("lease not ended at its deadline while its renewal hangs")
	}
	if end, _, _ := e.Ended(); end != Expired {
		t.Errorf("ended as %v, want Expired", end)
	}
	// The group emptied: the hanging batch is cancelled.
	select {
	case <-advanced:
	case <-time.After(30 * time.Second):
		t.Fatal("batch not cancelled when its last lease ended (watchdog)")
	}
}

func TestScheduler_releasedLeaseLeavesGroup(t *testing.T) {
	s, r, clk := newBatchScheduler()
	const validity = 3 * time.Second
	a := startAt(s, clk, 1, validity)
	b := startAt(s, clk, 2, validity)
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(validity / 3)
	if got := r.sent(); len(got) != 1 || !slices.Equal(got[0].ids, []int{2}) {
		t.Fatalf("batches %+v, want one of lease 2 alone", got)
	}
	if err := b.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(validity)
	if got := len(r.sent()); got != 1 {
		t.Errorf("%d batches, want no more once every lease is released", got)
	}
	s.mu.Lock()
	groups := len(s.groups)
	s.mu.Unlock()
	if groups != 0 {
		t.Errorf("%d groups left with no lease", groups)
	}
}
