package zkdlock_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// TestKindMismatch_refusedBeforeCreating: a key held (or waited for) as
// one kind refuses every request of another kind, or of another limit,
// with ErrKindMismatch naming what the key is, and the server is left
// exactly as it was: no node created, the key node not even written.
func TestKindMismatch_refusedBeforeCreating(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	for _, tc := range []struct {
		name string
		hold func(c *dlock.Client, key string) (*dlock.Lease, error)
		want string   // in the message
		same []string // the calls of the same kind
	}{
		{"lock", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.Lock(ctx, key) }, "it is a lock", []string{"Lock", "TryLock"}},
		{"semaphore", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.Semaphore(key, 3).Acquire(ctx) }, "it is a semaphore of 3 permits", []string{"Semaphore(3).Acquire", "Semaphore(3).TryAcquire"}},
		{"rwmutex", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.RWMutex(key).RLock(ctx) }, "it is a read-write lock", []string{"RWMutex.Lock", "RWMutex.TryRLock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "kind-" + tc.name
			path := zkdlock.KeyPathForTest(opts.Root, key)
			holder := plainClient(t, ctx, srv.Addr(), opts)
			l, err := tc.hold(holder, key)
			if err != nil {
				t.Fatal(err)
			}
			names := children(t, admin, path)
			_, stat, err := admin.Get(path)
			if err != nil {
				t.Fatal(err)
			}
			c := plainClient(t, ctx, srv.Addr(), opts)
			calls := map[string]acquireFunc{
				"Lock": func(ctx2 ctxT, o ...dlock.LockOption) (*dlock.Lease, error) { return c.Lock(ctx2, key, o...) },
				"TryLock": func(ctx2 ctxT, o ...dlock.LockOption) (*dlock.Lease, error) {
					return c.TryLock(ctx2, key, o...)
				},
				"Semaphore(3).Acquire":    c.Semaphore(key, 3).Acquire,
				"Semaphore(2).Acquire":    c.Semaphore(key, 2).Acquire,
				"Semaphore(3).TryAcquire": c.Semaphore(key, 3).TryAcquire,
				"RWMutex.Lock":            c.RWMutex(key).Lock,
				"RWMutex.TryRLock":        c.RWMutex(key).TryRLock,
			}
			for name, f := range calls {
				if slices.Contains(tc.same, name) {
					continue
				}
				_, err := f(ctx)
				if !errors.Is(err, dlock.ErrKindMismatch) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s on a %s: %v, want ErrKindMismatch saying %q", name, tc.name, err, tc.want)
				}
			}
			_, after, err := admin.Get(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := children(t, admin, path); !slices.Equal(got, names) || after.Mzxid != stat.Mzxid || after.Cversion != stat.Cversion {
				t.Errorf("after the refusals: nodes %v (cversion %d, mzxid %d), want %v (cversion %d, mzxid %d): the server changed", got, after.Cversion, after.Mzxid, names, stat.Cversion, stat.Mzxid)
			}
			mustUnlock(t, ctx, l)
			// Once free, the key serves any kind.
			l2, err := c.Semaphore(key, 2).TryAcquire(ctx)
			if err != nil {
				t.Fatalf("a semaphore on the freed key: %v", err)
			}
			mustUnlock(t, ctx, l2)
		})
	}
}

// TestKindMismatch_afterHint_leavesNothing: a Client whose last listing
// of the key showed it free, or in use as the same kind, creates its node
// before it lists (the lock's request counts of before kinds); if the key
// is meanwhile in use as another kind, its listing finds out, and the node
// goes before the error returns.
func TestKindMismatch_afterHint_leavesNothing(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	for _, tc := range []struct {
		name string
		look func(t *testing.T, c *dlock.Client, key string) // leaves the hint
	}{
		{"free", func(t *testing.T, c *dlock.Client, key string) {
			mustUnlock(t, ctx, mustLock(t, ctx, c, key))
		}},
		{"same kind", func(t *testing.T, c *dlock.Client, key string) {
			l := mustLock(t, ctx, plainClient(t, ctx, srv.Addr(), opts), key)
			if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
				t.Fatalf("TryLock on a held key: %v", err)
			}
			mustUnlock(t, ctx, l)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "kind-hint-" + strings.ReplaceAll(tc.name, " ", "-")
			path := zkdlock.KeyPathForTest(opts.Root, key)
			hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}
			c := newClient(t, ctx, hook, opts)
			tc.look(t, c, key)
			other := plainClient(t, ctx, srv.Addr(), opts)
			l, err := other.Semaphore(key, 2).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			names := children(t, admin, path)
			creates := hook.creates.Load()
			if _, err := c.Lock(ctx, key); !errors.Is(err, dlock.ErrKindMismatch) {
				t.Fatalf("Lock on a semaphore's key: %v, want ErrKindMismatch", err)
			}
			if hook.creates.Load() == creates {
				t.Error("no create: the hint was not used, so this test does not test it")
			}
			if got := children(t, admin, path); !slices.Equal(got, names) {
				t.Errorf("nodes %v after the refusal, want %v", got, names)
			}
			mustUnlock(t, ctx, l)
		})
	}
}

// heldCreates holds every create of a lock node until release is closed,
// after signalling on started.
type heldCreates struct {
	*hookConn
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *heldCreates) Multi(ops ...any) ([]zk.MultiResponse, error) {
	if _, ok := ops[0].(*zk.CreateRequest); ok {
		h.once.Do(func() { close(h.started) })
		<-h.release
	}
	return h.hookConn.Multi(ops...)
}

// TestKindMismatch_race_laterNodeFails: a lock and a semaphore queue on a
// free key at once: both list it empty, then both create. The later node
// (the lock's, here) finds the earlier one of another kind ahead of it,
// removes itself and fails; the earlier is granted and was never blocked.
func TestKindMismatch_race_laterNodeFails(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	const key = "kind-race"
	path := zkdlock.KeyPathForTest(opts.Root, key)
	h := &heldCreates{hookConn: &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}, started: make(chan struct{}), release: make(chan struct{})}
	c := newClient(t, ctx, h, opts)
	lockCall := startAcquire(ctx, func(ctx2 ctxT, o ...dlock.LockOption) (*dlock.Lease, error) { return c.Lock(ctx2, key, o...) })
	select {
	case <-h.started: // listed the key free, and about to create
	case <-ctx.Done():
		t.Fatal("no create (watchdog)")
	}
	sem, err := plainClient(t, ctx, srv.Addr(), opts).Semaphore(key, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	close(h.release)
	<-lockCall.done
	if !errors.Is(lockCall.err, dlock.ErrKindMismatch) || !strings.Contains(lockCall.err.Error(), "it is a semaphore of 2 permits, not a lock") {
		t.Fatalf("the later Lock: %v, want ErrKindMismatch", lockCall.err)
	}
	if got := children(t, admin, path); len(got) != 1 || !strings.HasPrefix(got[0], "semaphore.2.s-") {
		t.Errorf("nodes %v, want only the semaphore's", got)
	}
	mustUnlock(t, ctx, sem)
}
