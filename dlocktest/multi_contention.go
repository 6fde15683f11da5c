package dlocktest

// The contention scenarios of LockAll: callers asking for overlapping key
// sets in different orders never hold a key together and never deadlock.
// A deadlock shows as calls that do not return before the watchdog; the
// scenario then fails with the queues of the keys, which show the cycle.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock"
)

// multiSeed seeds the key sets of MultiLock_randomSubsets_noOverlapNoDeadlock:
// the same sets, in the same orders, on every run (the interleaving still
// varies).
const multiSeed = 13

// holdAll enters the critical section of every key of m, checks it, and
// leaves: a key held twice at once, or a token not above the last one
// seen on a key, is recorded by res.
func holdAll(res map[string]*fencedResource, who string, m *dlock.MultiLease) {
	for _, l := range m.Leases() {
		res[l.Key()].enter(who, l.Token())
	}
	runtime.Gosched() // give an overlapping holder a chance to show up
	for _, l := range m.Leases() {
		res[l.Key()].exit()
	}
}

// callContext returns the context of calls that the watchdog must not end
// by itself: when it fires, the scenario first records the queues the calls
// wait in (describeQueues), then ends them with stop.
func (s *suite) callContext() (ctx context.Context, stop context.CancelFunc) {
	return context.WithCancel(context.WithoutCancel(s.ctx))
}

// describeQueues renders who holds and waits for each key, by note, for the
// report of a call stuck until the watchdog.
func (s *suite) describeQueues(c *dlock.Client, ks []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, k := range ks {
		info, err := c.Inspect(ctx, k)
		if err != nil {
			fmt.Fprintf(&b, "\n\t%s: %v", k, err)
			continue
		}
		var hs, ws []string
		for _, h := range info.Holders {
			hs = append(hs, h.Metadata.Note)
		}
		for _, w := range info.Waiters {
			ws = append(ws, w.Metadata.Note)
		}
		fmt.Fprintf(&b, "\n\t%s: held by %q, waited for by %q", k, hs, ws)
	}
	return b.String()
}

func testMultiLock_oppositeOrders_noDeadlock(s *suite) {
	// a asks for (k0, k1), b for (k1, k0), while h holds both. Locked in
	// the callers' orders, a would queue on k0 and b on k1; h's releases
	// would give each its first key, and each would then wait forever
	// behind the other. Taken in one order, both queue on k0 and are
	// served one after the other.
	h, a, b := s.client(), s.client(), s.client()
	ks := s.multiKeys(2)
	l0, l1 := s.lock(h, ks[0], s.ttl()), s.lock(h, ks[1], s.ttl())
	ctx, stop := s.callContext()
	defer stop()
	var res = map[string]*fencedResource{ks[0]: {}, ks[1]: {}}
	errc := make(chan error, 2)
	for _, w := range []struct {
		name string
		c    *dlock.Client
		keys []string
	}{{"a", a, []string{ks[0], ks[1]}}, {"b", b, []string{ks[1], ks[0]}}} {
		go func() {
			m, err := w.c.LockAll(ctx, w.keys, s.ttl(), note(w.name))
			if err != nil {
				errc <- fmt.Errorf("%s: LockAll(%q): %w", w.name, w.keys, err)
				return
			}
			holdAll(res, w.name, m)
			errc <- m.Unlock(s.ctx)
		}()
	}
	// Both must be queued before h lets go, or one may simply get both.
	if _, err := h.Inspect(s.ctx, ks[0]); !isUnsupported(err) {
		s.eventually("a and b queued", func() bool {
			n := 0
			for _, k := range ks {
				n += len(s.inspect(h, k).Waiters)
			}
			return n == 2
		})
	}
	s.unlock(l0)
	s.unlock(l1)
	for range 2 {
		select {
		case err := <-errc:
			if err != nil {
				s.t.Fatalf("%v\nqueues:%s", err, s.describeQueues(h, ks))
			}
		case <-s.ctx.Done():
			queues := s.describeQueues(h, ks) // while the calls still wait
			stop()
			s.t.Fatalf("LockAll calls of the same keys in opposite orders did not return before the watchdog: deadlock\nqueues:%s", queues)
		}
	}
	for k, r := range res {
		if _, problems := r.report(); len(problems) > 0 {
			s.t.Errorf("%s: %q", k, problems)
		}
		s.checkNothingLeft(k)
	}
}

func testMultiLock_randomSubsets_noOverlapNoDeadlock(s *suite) {
	// 8 callers, each with its own client, lock random subsets of 5 keys
	// (2 to 5 of them, in random order) for a bounded number of rounds;
	// two of them use TryLockAll. No key may be held twice at once, every
	// call must return before the watchdog, and nothing may be left.
	const callers, rounds, nkeys, tryers = 8, 8, 5, 2
	ks := s.multiKeys(nkeys)
	rng := rand.New(rand.NewPCG(multiSeed, multiSeed))
	plans := make([][][]string, callers)
	for i := range plans {
		plans[i] = make([][]string, rounds)
		for r := range plans[i] {
			perm := rng.Perm(nkeys)[:2+rng.IntN(nkeys-1)]
			for _, p := range perm {
				plans[i][r] = append(plans[i][r], ks[p])
			}
		}
	}
	clients := make([]*dlock.Client, callers)
	for i := range clients {
		clients[i] = s.client()
	}
	res := make(map[string]*fencedResource, nkeys)
	for _, k := range ks {
		res[k] = &fencedResource{}
	}

	// A failed call cancels the others: the report is about the first.
	// At the watchdog, the queues are recorded before the calls end.
	ctx, cancel := s.callContext()
	defer cancel()
	var queuesAtWatchdog string
	finished := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-finished:
		case <-s.ctx.Done():
			queuesAtWatchdog = s.describeQueues(clients[0], ks)
			cancel()
		}
	}()
	var (
		mu       sync.Mutex
		errs     []error
		sections = make(map[string]int) // per key, critical sections entered
		refused  int                    // TryLockAll calls refused with ErrLocked
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			for r, plan := range plans[i] {
				who := fmt.Sprintf("caller%d/round%d", i, r)
				var m *dlock.MultiLease
				var err error
				if i < tryers {
					m, err = c.TryLockAll(ctx, plan, s.ttl(), note(who))
					if errors.Is(err, dlock.ErrLocked) {
						mu.Lock()
						refused++
						mu.Unlock()
						continue
					}
				} else {
					m, err = c.LockAll(ctx, plan, s.ttl(), note(who))
				}
				if err != nil {
					if ctx.Err() != nil && s.ctx.Err() == nil {
						return // another caller failed first
					}
					if s.ctx.Err() != nil {
						err = fmt.Errorf("%w (the watchdog ended the call: a deadlock, or callers starved)", err)
					}
					fail(fmt.Errorf("%s: LockAll(%q): %w", who, plan, err))
					return
				}
				keysOf := func() (out []string) {
					for _, l := range m.Leases() {
						out = append(out, l.Key())
					}
					return out
				}
				if got := keysOf(); !slices.Equal(got, plan) {
					fail(fmt.Errorf("%s: leases for %q, want the caller's order %q", who, got, plan))
					return
				}
				holdAll(res, who, m)
				mu.Lock()
				for _, k := range plan {
					sections[k]++
				}
				mu.Unlock()
				if err := m.Err(); err != nil {
					fail(fmt.Errorf("%s: lease lost on a healthy server: %w", who, err))
					return
				}
				if err := m.Unlock(s.ctx); err != nil {
					fail(fmt.Errorf("%s: Unlock: %w", who, err))
					return
				}
			}
		})
	}
	wg.Wait()
	close(finished)
	<-watched
	if len(errs) > 0 {
		queues := queuesAtWatchdog
		if queues == "" {
			queues = s.describeQueues(clients[0], ks)
		}
		s.t.Fatalf("seed %d: %v\nqueues:%s", multiSeed, errs[0], queues)
	}
	for _, k := range ks {
		writes, problems := res[k].report()
		for _, p := range problems {
			s.t.Errorf("seed %d, key %s: %s", multiSeed, k, p)
		}
		if writes != sections[k] {
			s.t.Errorf("key %s: resource saw %d critical sections, callers entered %d", k, writes, sections[k])
		}
		s.checkNothingLeft(k)
	}
	s.t.Logf("seed %d: %d LockAll/TryLockAll calls, %d TryLockAll refused", multiSeed, callers*rounds, refused)
}
