// Package dlocktest is the conformance suite that every dlock backend runs
// against a real server:
//
//	func TestConformance(t *testing.T) {
//		dlocktest.Run(t, func(ctx context.Context, t *testing.T) (dlocktest.Harness, error) {
//			return newHarness(t) // clients connected to a server the test started
//		})
//	}
//
// The suite checks every semantic that package dlock documents: mutual
// exclusion under contention, self-renewing leases, fencing tokens that only
// go up, the lost-lease signal arriving before anyone else can be granted the
// key, Unlock never releasing someone else's lock, FIFO waiting that leaves
// nothing behind when cancelled, and bad input; and the same for semaphores
// and read-write locks (Client.Semaphore, Client.RWMutex), with what they
// add: never more than the limit of permits, a writer alone, permits and
// consecutive readers granted together, a reader behind a waiting writer
// waiting behind it, kinds that refuse each other; leader election
// (Client.Election: one leader, hand-over in arrival order, Proclaim and
// Observe); locks of several keys (Client.LockAll: all or none, no
// deadlock between callers asking in different orders); Client.Revoke (a
// holder's lease ends, the waiter is granted above its token, a fenced
// resource refuses the revoked holder, a permit revoked frees one) and
// WithLockDelay (no grant before the delay after a revoke or an expiry,
// none after an Unlock), when the backend's driver implements
// driver.Revoker; and Client.Watch,
// told of every change of a key's holders and waiters (a backend that is
// not says so with ObserverLimiter). Scenarios that need
// a fault (cutting a client off, deleting a key behind its holder's back,
// restarting the server) run when the harness offers the matching optional
// interface: FaultyClientMaker, KeyDeleter, ServerRestarter,
// LeftoverChecker. They are reported with t.Skip when it does not; so are
// those of a Client built by the backend's New on a server client the
// application owns (OwnedClientMaker), and of what a Client reports to its
// dlock.Hooks (OptionClientMaker).
//
// The scenarios of semaphores and read-write locks check the queue with
// Inspect right after each step, so they need of a backend that its Inspect
// shows an entry the grant rule admits as a holder from the moment the entry
// is on the server, and that a release, a cancelled wait or Client.Close has
// granted every waiter it made grantable by the time it returns (not at a
// later poll).
//
// The suite has no false positives but may miss bugs: run it with -race, and
// more than once. Every wait is bounded by a watchdog that fails the test.
package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// Harness gives the suite clients of one backend.
type Harness interface {
	// NewClient returns a new, independent Client: its own connection or
	// session, as another process would have. The harness closes it when
	// the test ends (t.Cleanup) unless the suite has closed it first.
	NewClient(ctx context.Context, t *testing.T) (*dlock.Client, error)

	// TTL is the lease length the suite gives its short-lived leases, the
	// shortest the backend serves reliably on a loaded machine (about 1 s).
	TTL() time.Duration
}

// HarnessMaker makes a Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// Link is the network path between one client and the server.
type Link interface {
	// Blackhole makes the path silent in both directions without closing
	// it, like a partition or a frozen process.
	Blackhole()
	// Restore ends Blackhole.
	Restore()
}

// FaultyClientMaker is implemented by harnesses that can cut one client off.
type FaultyClientMaker interface {
	// NewFaultyClient returns a new client whose every connection to the
	// server goes through the returned Link (a Proxy, typically).
	NewFaultyClient(ctx context.Context, t *testing.T) (*dlock.Client, Link, error)
}

// KeyDeleter is implemented by harnesses that can remove a key's state on the
// server behind its holder's back, as an operator or a bug might.
type KeyDeleter interface {
	DeleteKey(ctx context.Context, key string) error
}

// ServerRestarter is implemented by harnesses that can restart the server
// and lose everything it keeps in memory. Clients must reconnect by themselves.
type ServerRestarter interface {
	RestartServer(ctx context.Context, t *testing.T) error
}

// LeftoverChecker is implemented by harnesses that can list what the server
// still stores for a key (keys, nodes, queue entries), so the suite can check
// that nothing is left behind.
type LeftoverChecker interface {
	Leftovers(ctx context.Context, key string) ([]string, error)
}

// OwnedClientMaker is implemented by harnesses whose backend builds a Client
// on a server client the application made and keeps (the backend's New), so
// the suite can check what that Client's Close leaves to its owner.
type OwnedClientMaker interface {
	// NewOwnedClient returns a Client built by the backend's New on a new
	// server client (connection, session) that the harness made and closes
	// when the test ends, and alive, which returns an error once that
	// server client no longer works.
	NewOwnedClient(ctx context.Context, t *testing.T) (c *dlock.Client, alive func(context.Context) error, err error)

	// CloseReleases tells what Client.Close does with a lease in its
	// minimum hold: true when it frees the key before returning (ZooKeeper,
	// whose node would otherwise last as long as the owner's session),
	// false when it leaves the key held until the server expires the
	// lease's TTL (Redis, etcd).
	CloseReleases() bool
}

// Run runs the conformance suite.
func Run(t *testing.T, newHarness HarnessMaker) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			// The watchdog: no scenario may hang the test binary.
			limit := 60*time.Second + 30*h.TTL()
			ctx, cancelWatch := context.WithTimeout(ctx, limit)
			defer cancelWatch()
			s := &suite{t: t, h: h, ctx: ctx}
			tc.fn(s)
		})
	}
}

type testCase struct {
	name string
	fn   func(*suite)
}

// tests is every scenario Run runs, in order, by the file that holds it.
// The names are the subtests' and are cited in docs and commands (-run):
// keep them.
var tests = []testCase{
	// client.go
	{"BadInput_rejected", testBadInput_rejected},
	{"Inspect_showsHolderAndWaiters", testInspect_showsHolderAndWaiters},
	{"Client_Close", testClient_Close},
	{"Client_Close_unreachableServerIsBounded", testClient_Close_unreachableServerIsBounded},
	{"Do_nestedSameKey_ErrReentrant", testDo_nestedSameKey_ErrReentrant},
	// election_faults.go
	{"Election_cutOffLeaderReplacedAfterTTL", testElection_cutOffLeaderReplacedAfterTTL},
	{"Election_clientCloseResigns", testElection_clientCloseResigns},
	// election_lead.go
	{"Election_leadRunsWhileLeading", testElection_leadRunsWhileLeading},
	// election_observe.go
	{"Election_observeEveryChangeInOrder", testElection_observeEveryChangeInOrder},
	{"Election_observeSlowReaderGetsLatest", testElection_observeSlowReaderGetsLatest},
	// election_terms.go
	{"Election_oneLeaderUnderContention", testElection_oneLeaderUnderContention},
	{"Election_arrivalOrder_resignHandsOver", testElection_arrivalOrder_resignHandsOver},
	{"Election_leaderInfo", testElection_leaderInfo},
	{"Election_proclaimAfterLossFails", testElection_proclaimAfterLossFails},
	{"Election_kindMismatch", testElection_kindMismatch},
	// exclusion.go
	{"TryLock_heldByOther", testTryLock_heldByOther},
	{"Lock_waitsForRelease", testLock_waitsForRelease},
	{"MutualExclusion_manyClients", testMutualExclusion_manyClients},
	{"MutualExclusion_tryLockRace", testMutualExclusion_tryLockRace},
	// hooks.go
	{"Hooks_grantRenewalReleaseReported", testHooks_grantRenewalReleaseReported},
	// kinds.go
	{"Semaphore_RWMutex_kindMismatch", testSemaphore_RWMutex_kindMismatch},
	{"Semaphore_RWMutex_tokensIncreaseAcrossModesAndKinds", testSemaphore_RWMutex_tokensIncreaseAcrossModesAndKinds},
	{"Semaphore_RWMutex_tokensIncreaseAcrossServerRestart", testSemaphore_RWMutex_tokensIncreaseAcrossServerRestart},
	// lease.go
	{"Lease_renewsItself", testLease_renewsItself},
	{"Lease_holderCutOff_lostBeforeNextGrant", testLease_holderCutOff_lostBeforeNextGrant},
	{"Lease_keyDeleted_lost", testLease_keyDeleted_lost},
	{"Lease_manyHeld_renewedTogether_lostAlone", testLease_manyHeld_renewedTogether_lostAlone},
	{"Do_cancelsContextOnLoss", testDo_cancelsContextOnLoss},
	{"Do_runsAndUnlocks", testDo_runsAndUnlocks},
	{"Token_increasesAcrossGrants", testToken_increasesAcrossGrants},
	{"Token_increasesAcrossServerRestart", testToken_increasesAcrossServerRestart},
	// lockdelay.go
	{"LockDelay_afterRevoke_nextGrantWaits", testLockDelay_afterRevoke_nextGrantWaits},
	{"LockDelay_afterExpiry_nextGrantWaits", testLockDelay_afterExpiry_nextGrantWaits},
	{"LockDelay_semaphorePermitStaysTaken", testLockDelay_semaphorePermitStaysTaken},
	{"LockDelay_cleanUnlock_noDelay", testLockDelay_cleanUnlock_noDelay},
	{"LockDelay_outOfRange_invalidOption", testLockDelay_outOfRange_invalidOption},
	// multi.go
	{"MultiLock_heldTogether_leasesInCallerOrder", testMultiLock_heldTogether_leasesInCallerOrder},
	{"MultiLock_oneHeldByOther_allOrNone", testMultiLock_oneHeldByOther_allOrNone},
	{"MultiLock_cancelWhileWaitingOnSecond_leavesNothing", testMultiLock_cancelWhileWaitingOnSecond_leavesNothing},
	{"MultiLock_clientClose_endsAll", testMultiLock_clientClose_endsAll},
	{"MultiLock_keyDeleted_doneCloses", testMultiLock_keyDeleted_doneCloses},
	{"MultiLock_holderCutOff_lostBeforeNextGrant", testMultiLock_holderCutOff_lostBeforeNextGrant},
	{"MultiLock_badInput_takesNothing", testMultiLock_badInput_takesNothing},
	{"MultiLock_insideDo_reentrant", testMultiLock_insideDo_reentrant},
	// multi_contention.go
	{"MultiLock_oppositeOrders_noDeadlock", testMultiLock_oppositeOrders_noDeadlock},
	{"MultiLock_randomSubsets_noOverlapNoDeadlock", testMultiLock_randomSubsets_noOverlapNoDeadlock},
	// queue.go
	{"Lock_fifo", testLock_fifo},
	{"Lock_cancelWhileWaiting_leavesNothing", testLock_cancelWhileWaiting_leavesNothing},
	{"Lock_deadlineWhileHeld", testLock_deadlineWhileHeld},
	{"Lock_cancelAtHandOff_nextWaiterServed", testLock_cancelAtHandOff_nextWaiterServed},
	{"Lock_deadWaiterSkipped", testLock_deadWaiterSkipped},
	// revoke.go
	{"Revoke_all_waiterGrantedHolderFenced", testRevoke_all_waiterGrantedHolderFenced},
	{"Revoke_all_everyReader", testRevoke_all_everyReader},
	{"Revoke_byToken_onePermit", testRevoke_byToken_onePermit},
	{"Revoke_unknownToken_changesNothing", testRevoke_unknownToken_changesNothing},
	{"Revoke_freeKey", testRevoke_freeKey},
	// rwmutex.go
	{"RWMutex_safety_readersAndWriters", testRWMutex_safety_readersAndWriters},
	{"RWMutex_fifo_readersAtHeadGrantedTogether", testRWMutex_fifo_readersAtHeadGrantedTogether},
	{"RWMutex_readerWaitsBehindWaitingWriter", testRWMutex_readerWaitsBehindWaitingWriter},
	{"RWMutex_tryLockAndTryRLock", testRWMutex_tryLockAndTryRLock},
	{"RWMutex_writerCutOff_lostBeforeReadersGranted", testRWMutex_writerCutOff_lostBeforeReadersGranted},
	{"RWMutex_cancelWhileWaiting_leavesNothing", testRWMutex_cancelWhileWaiting_leavesNothing},
	{"RWMutex_deadlineWhileReadersHold", testRWMutex_deadlineWhileReadersHold},
	{"RWMutex_inspect_kindModesInOrder", testRWMutex_inspect_kindModesInOrder},
	{"RWMutex_cancelAtHandOff_readersServed", testRWMutex_cancelAtHandOff_readersServed},
	{"RWMutex_deadWriterWaiting_readersServed", testRWMutex_deadWriterWaiting_readersServed},
	// schedule.go
	{"Do_noWait_skipsWhileHeld", testDo_noWait_skipsWhileHeld},
	{"Do_holdAtLeast_keepsKeyAfterJob", testDo_holdAtLeast_keepsKeyAfterJob},
	{"OwnedClient_closeInMinimumHold", testOwnedClient_closeInMinimumHold},
	{"Do_holdAtLeast_releasesAfterHold", testDo_holdAtLeast_releasesAfterHold},
	{"Lock_holdAtLeast_unlockDefers", testLock_holdAtLeast_unlockDefers},
	{"Do_holdAtMost_releasesHungJob", testDo_holdAtMost_releasesHungJob},
	{"Lock_holdAtMost_unlockAfterLimit", testLock_holdAtMost_unlockAfterLimit},
	{"Lock_holdAtLeastAndMost_unlockReleasesAtMinimum", testLock_holdAtLeastAndMost_unlockReleasesAtMinimum},
	// semaphore.go
	{"Semaphore_safety_manyContenders", testSemaphore_safety_manyContenders},
	{"Semaphore_saturation_allPermitsGranted", testSemaphore_saturation_allPermitsGranted},
	{"Semaphore_releaseOfSeveral_grantsAsMany", testSemaphore_releaseOfSeveral_grantsAsMany},
	{"Semaphore_fifo", testSemaphore_fifo},
	{"Semaphore_tryAcquire", testSemaphore_tryAcquire},
	{"Semaphore_holderCutOff_lostBeforeNextGrant", testSemaphore_holderCutOff_lostBeforeNextGrant},
	{"Semaphore_cancelWhileWaiting_leavesNothing", testSemaphore_cancelWhileWaiting_leavesNothing},
	{"Semaphore_RWMutex_clientClose", testSemaphore_RWMutex_clientClose},
	{"Semaphore_limitBelowOne_invalidOption", testSemaphore_limitBelowOne_invalidOption},
	{"Semaphore_inspect_kindLimitHoldersWaiters", testSemaphore_inspect_kindLimitHoldersWaiters},
	{"Semaphore_cancelAtHandOff_nextWaiterServed", testSemaphore_cancelAtHandOff_nextWaiterServed},
	// watch.go
	{"Watch_noticeAfterGrantJoinRelease", testWatch_noticeAfterGrantJoinRelease},
}

// suite is the state of one subtest.
type suite struct {
	t   *testing.T
	h   Harness
	ctx context.Context
}

var keySeq atomic.Int64

// key returns a key unique to this subtest and call.
func (s *suite) key() string {
	name := strings.NewReplacer(" ", "_").Replace(s.t.Name())
	return fmt.Sprintf("dlocktest/%s/%d", name, keySeq.Add(1))
}

func (s *suite) client() *dlock.Client {
	s.t.Helper()
	c, err := s.h.NewClient(s.ctx, s.t)
	if err != nil {
		s.t.Fatalf("NewClient: %v", err)
	}
	return c
}

func (s *suite) faulty() (*dlock.Client, Link) {
	s.t.Helper()
	f, ok := s.h.(FaultyClientMaker)
	if !ok {
		s.t.Skip("backend harness cannot cut a client off (no FaultyClientMaker)")
	}
	c, link, err := f.NewFaultyClient(s.ctx, s.t)
	if err != nil {
		s.t.Fatalf("NewFaultyClient: %v", err)
	}
	return c, link
}

func (s *suite) ttl() dlock.CommonOption { return dlock.WithTTL(s.h.TTL()) }

func (s *suite) lock(c *dlock.Client, key string, opts ...dlock.LockOption) *dlock.Lease {
	s.t.Helper()
	l, err := c.Lock(s.ctx, key, opts...)
	if err != nil {
		s.t.Fatalf("Lock(%q): %v", key, err)
	}
	return l
}

func (s *suite) tryLock(c *dlock.Client, key string, opts ...dlock.LockOption) *dlock.Lease {
	s.t.Helper()
	l, err := c.TryLock(s.ctx, key, opts...)
	if err != nil {
		s.t.Fatalf("TryLock(%q): %v", key, err)
	}
	return l
}

func (s *suite) unlock(l *dlock.Lease) {
	s.t.Helper()
	if err := l.Unlock(s.ctx); err != nil {
		s.t.Fatalf("Unlock(%q): %v", l.Key(), err)
	}
}

// waitDone waits for a lease to end, failing the test at the watchdog.
func (s *suite) waitDone(l *dlock.Lease, why string) {
	s.t.Helper()
	select {
	case <-l.Done():
	case <-s.ctx.Done():
		s.t.Fatalf("lease on %q not lost after %s (watchdog)", l.Key(), why)
	}
}

// eventually polls cond until it holds, failing the test at the watchdog.
// It is for conditions the suite can only observe from outside (the queue on
// the server), not a substitute for waiting on an event.
func (s *suite) eventually(what string, cond func() bool) {
	s.t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-s.ctx.Done():
			s.t.Fatalf("%s: not reached before the watchdog", what)
		}
	}
}

// inspect returns the key's state, skipping the test if the backend cannot inspect.
func (s *suite) inspect(c *dlock.Client, key string) *dlock.LockInfo {
	s.t.Helper()
	info, err := c.Inspect(s.ctx, key)
	if err != nil {
		if isUnsupported(err) {
			s.t.Skip("backend cannot inspect locks")
		}
		s.t.Fatalf("Inspect(%q): %v", key, err)
	}
	return info
}

// waitQueued waits until the waiter with this note is queued on key.
func (s *suite) waitQueued(c *dlock.Client, key, note string) {
	s.t.Helper()
	s.eventually("waiter "+note+" queued", func() bool {
		for _, w := range s.inspect(c, key).Waiters {
			if w.Metadata.Note == note {
				return true
			}
		}
		return false
	})
}

// checkNothingLeft fails the test if the server stores anything for key.
func (s *suite) checkNothingLeft(key string) {
	s.t.Helper()
	lc, ok := s.h.(LeftoverChecker)
	if !ok {
		return
	}
	left, err := lc.Leftovers(s.ctx, key)
	if err != nil {
		s.t.Fatalf("Leftovers(%q): %v", key, err)
	}
	if len(left) > 0 {
		s.t.Fatalf("server still stores %q for key %q", left, key)
	}
}

// waitQueuedIfInspectable is waitQueued for backends that can inspect, and
// nothing for others.
func (s *suite) waitQueuedIfInspectable(c *dlock.Client, key, note string) {
	s.t.Helper()
	if _, err := c.Inspect(s.ctx, key); isUnsupported(err) {
		return
	}
	s.waitQueued(c, key, note)
}

func isUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
