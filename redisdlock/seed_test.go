package redisdlock_test

// The seed's Redis recipe (../shared/seeds/001_*.txt, version 2: SETNX then
// EXPIRE; on failure GET the stored expiry time and, if it is in the past by
// the client's clock, GETSET a new one and win if the old value came back
// unchanged; DEL to release) has four well-known flaws. Each scenario below
// pins one of them. It runs against dlock, where it must pass, and against a
// tiny faithful copy of the seed's recipe, where it must FAIL: a scenario that
// cannot catch the flaw it is named after proves nothing.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/redis/go-redis/v9"
)

// errCrash, returned by a between hook, stops an acquire attempt where it
// is, as if the process had died there.
var errCrash = errors.New("crashed here")

// recipe is a lock algorithm under test, driven step by step.
type recipe interface {
	// acquire makes one attempt for who, whose wall clock is off by skew
	// (only a recipe that reads client clocks notices). between is called
	// between the recipe's server requests; an error stops the attempt.
	acquire(ctx context.Context, who string, skew time.Duration, between func(step string) error) (bool, error)
	// release is the recipe's own release, by who.
	release(ctx context.Context, who string) error
	// pause freezes who (no renewals, no requests); resume undoes it.
	pause(who string)
	resume(who string)
	// token returns who's fencing token, if the recipe has any.
	token(who string) (uint64, bool)
	// storedOwner says whose lock the server's data describes.
	storedOwner(ctx context.Context) (string, error)
	// keyTTL returns how long the server keeps the lock; negative: forever.
	keyTTL(ctx context.Context) (time.Duration, error)
}

// seedRecipe is the seed's version 2, with a 1 s lock.
type seedRecipe struct {
	rdb *redis.Client
	key string

	mu     sync.Mutex
	writer map[string]string // stored value -> who wrote it
}

const seedTimeout = time.Second

func (s *seedRecipe) stamp(who string, skew time.Duration) string {
	v := strconv.FormatInt(time.Now().Add(skew).Add(seedTimeout).UnixMilli(), 10)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writer[v] = who
	return v
}

func (s *seedRecipe) acquire(ctx context.Context, who string, skew time.Duration, between func(string) error) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.key, s.stamp(who, skew), 0).Result()
	if err != nil {
		return false, err
	}
	if ok {
		if between("after SETNX") != nil {
			return true, nil // died before EXPIRE
		}
		return true, s.rdb.Expire(ctx, s.key, seedTimeout).Err() // closeOrder's EXPIRE
	}
	v, err := s.rdb.Get(ctx, s.key).Result()
	if err != nil && err != redis.Nil {
		return false, err
	}
	if between("after GET") != nil {
		return false, nil
	}
	stored, _ := strconv.ParseInt(v, 10, 64)
	if v == "" || time.Now().Add(skew).UnixMilli() <= stored {
		return false, nil
	}
	//lint:ignore SA1019 the recipe under test is the classic one, GETSET (SET GET needs Redis 6.2)
	old, err := s.rdb.GetSet(ctx, s.key, s.stamp(who, skew)).Result()
	if err != nil && err != redis.Nil {
		return false, err
	}
	if old == "" || old == v {
		return true, s.rdb.Expire(ctx, s.key, seedTimeout).Err()
	}
	return false, nil
}

func (s *seedRecipe) release(ctx context.Context, who string) error {
	return s.rdb.Del(ctx, s.key).Err()
}
func (s *seedRecipe) pause(string)                {} // nothing runs in the background to stop
func (s *seedRecipe) resume(string)               {}
func (s *seedRecipe) token(string) (uint64, bool) { return 0, false }
func (s *seedRecipe) storedOwner(ctx context.Context) (string, error) {
	v, err := s.rdb.Get(ctx, s.key).Result()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writer[v], err
}
func (s *seedRecipe) keyTTL(ctx context.Context) (time.Duration, error) {
	return s.rdb.PTTL(ctx, s.key).Result()
}

// dlockRecipe drives dlock clients, each behind its own proxy so that it can
// be frozen.
type dlockRecipe struct {
	t     *testing.T
	srv   *testserver.Redis
	key   string
	admin *dlock.Client
	mu    sync.Mutex
	who   map[string]*dlockParty
}

type dlockParty struct {
	client *dlock.Client
	link   *dlocktest.Proxy
	lease  *dlock.Lease
}

func (d *dlockRecipe) party(ctx context.Context, who string) *dlockParty {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.who[who]; p != nil {
		return p
	}
	p := &dlockParty{link: dlocktest.NewProxy(d.t, d.srv.Addr())}
	p.client = newTestClient(d.t, ctx, p.link.Addr(), nil)
	d.who[who] = p
	return p
}

func (d *dlockRecipe) acquire(ctx context.Context, who string, _ time.Duration, _ func(string) error) (bool, error) {
	// One atomic script: there is no step between which to stop or interleave.
	p := d.party(ctx, who)
	l, err := p.client.TryLock(ctx, d.key, dlock.WithTTL(time.Second), dlock.WithMetadata(dlock.Metadata{Note: who}))
	if errors.Is(err, dlock.ErrLocked) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p.lease = l
	return true, nil
}

func (d *dlockRecipe) release(ctx context.Context, who string) error {
	err := d.party(ctx, who).lease.Unlock(ctx)
	if errors.Is(err, dlock.ErrNotHeld) {
		return nil // the stale holder is told; nothing else happens
	}
	return err
}
func (d *dlockRecipe) pause(who string)  { d.who[who].link.Blackhole() }
func (d *dlockRecipe) resume(who string) { d.who[who].link.Restore() }
func (d *dlockRecipe) token(who string) (uint64, bool) {
	return d.who[who].lease.Token(), true
}
func (d *dlockRecipe) storedOwner(ctx context.Context) (string, error) {
	info, err := d.admin.Inspect(ctx, d.key)
	if err != nil || len(info.Holders) == 0 {
		return "", err
	}
	return info.Holders[0].Metadata.Note, nil
}
func (d *dlockRecipe) keyTTL(ctx context.Context) (time.Duration, error) {
	info, err := d.admin.Inspect(ctx, d.key)
	if err != nil || len(info.Holders) == 0 {
		return 0, err
	}
	return info.Holders[0].TTL, nil
}

func noSteps(string) error { return nil }

// eventuallyAcquire retries who's attempt until it wins: how a contender
// waits out an expiry without the test sleeping.
func eventuallyAcquire(ctx context.Context, r recipe, who string) error {
	for {
		ok, err := r.acquire(ctx, who, 0, noSteps)
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never acquired: %w", who, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

type seedScenario struct {
	name string
	run  func(ctx context.Context, r recipe) error
}

var seedScenarios = []seedScenario{
	{"crashBetweenSetAndExpire_keyHeldForever", func(ctx context.Context, r recipe) error {
		// A dies right after taking the lock, before anything else.
		ok, err := r.acquire(ctx, "A", 0, func(string) error { return errCrash })
		if err != nil || !ok {
			return fmt.Errorf("A did not get the free lock: %v", err)
		}
		r.pause("A")
		ttl, err := r.keyTTL(ctx)
		if err != nil {
			return err
		}
		if ttl < 0 {
			return errors.New("the lock of a crashed holder has no expiry: nobody will ever get it")
		}
		return eventuallyAcquire(ctx, r, "B")
	}},
	{"clientClockAhead_twoHolders", func(ctx context.Context, r recipe) error {
		if ok, err := r.acquire(ctx, "A", 0, noSteps); err != nil || !ok {
			return fmt.Errorf("A did not get the free lock: %v", err)
		}
		// B's clock is a minute fast: by B's clock, A's lock has expired.
		ok, err := r.acquire(ctx, "B", time.Minute, noSteps)
		if err != nil {
			return err
		}
		if ok {
			return errors.New("B acquired the lock while A held it (B's clock runs ahead)")
		}
		return nil
	}},
	{"racingForExpiredLock_loserOverwritesWinner", func(ctx context.Context, r recipe) error {
		// A's clock is behind, so its lock looks expired to everyone else
		// at once (dlock ignores the clock: there, A simply dies).
		if ok, err := r.acquire(ctx, "A", -10*time.Second, noSteps); err != nil || !ok {
			return fmt.Errorf("A did not get the free lock: %v", err)
		}
		r.pause("A")
		var cWon bool
		var cErr error
		for {
			once := sync.Once{}
			// Between B's reads and writes, C makes a whole attempt.
			bWon, err := r.acquire(ctx, "B", 0, func(string) error {
				once.Do(func() { cWon, cErr = r.acquire(ctx, "C", 0, noSteps) })
				return nil
			})
			if err != nil || cErr != nil {
				return errors.Join(err, cErr)
			}
			if !bWon && !cWon {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				time.Sleep(5 * time.Millisecond) // A's lock has not expired yet: try again
				continue
			}
			if bWon && cWon {
				return errors.New("B and C both won")
			}
			winner := map[bool]string{true: "B", false: "C"}[bWon]
			stored, err := r.storedOwner(ctx)
			if err != nil {
				return err
			}
			if stored != winner {
				return fmt.Errorf("%s won, but the server's lock data is %q's: the loser overwrote the winner's expiry", winner, stored)
			}
			return nil
		}
	}},
	{"releaseAfterExpiry_deletesNewOwnersLock", func(ctx context.Context, r recipe) error {
		if ok, err := r.acquire(ctx, "A", 0, noSteps); err != nil || !ok {
			return fmt.Errorf("A did not get the free lock: %v", err)
		}
		r.pause("A") // a long GC pause: A's lock expires
		if err := eventuallyAcquire(ctx, r, "B"); err != nil {
			return err
		}
		r.resume("A")
		if err := r.release(ctx, "A"); err != nil { // A finishes its job and releases
			return err
		}
		ok, err := r.acquire(ctx, "C", 0, noSteps)
		if err != nil {
			return err
		}
		if ok {
			return errors.New("A's release freed B's lock: C got it while B still held it")
		}
		return nil
	}},
	{"pausedHolderWrites_noFencing", func(ctx context.Context, r recipe) error {
		var res fencedStore
		if ok, err := r.acquire(ctx, "A", 0, noSteps); err != nil || !ok {
			return fmt.Errorf("A did not get the free lock: %v", err)
		}
		r.pause("A")
		if err := eventuallyAcquire(ctx, r, "B"); err != nil {
			return err
		}
		res.write(r.token("B"))
		r.resume("A")
		if res.write(r.token("A")) {
			return errors.New("the paused holder's late write was accepted: nothing tells the store it is stale")
		}
		return nil
	}},
}

// fencedStore accepts a write unless its token is below the highest seen. A
// write without a token cannot be checked, so it is accepted.
type fencedStore struct{ max uint64 }

func (s *fencedStore) write(token uint64, fenced bool) bool {
	if !fenced {
		return true
	}
	if token < s.max {
		return false
	}
	s.max = token
	return true
}

func TestSeedRecipeFlaws(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	for i, sc := range seedScenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := fmt.Sprintf("seed-%d", i)
			d := &dlockRecipe{t: t, srv: srv, key: key, admin: newTestClient(t, ctx, srv.Addr(), nil), who: map[string]*dlockParty{}}
			if err := sc.run(ctx, d); err != nil {
				t.Errorf("dlock: %v", err)
			}
			seed := &seedRecipe{rdb: rdb, key: "seed:" + key, writer: map[string]string{}}
			if err := sc.run(ctx, seed); err == nil {
				t.Errorf("negative control: the seed's recipe passed, so this scenario cannot catch its flaw")
			} else {
				t.Logf("negative control caught the seed's recipe: %v", err)
			}
		})
	}
}
