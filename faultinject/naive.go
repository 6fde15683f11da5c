package faultinject

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/backoff"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
)

// The naive recipes are the negative controls of the scenarios that test a
// backend's algorithm: each has the flaws of locks commonly written by hand,
// runs under dlock's real lease engine (dlock.NewClient), and must be caught
// by every checker that claims to detect those flaws. They are never used
// for anything else.

// naiveGrant is what a naive recipe's grant tells the lease engine: the
// client's own sequence number as token, validity counted from the request,
// and no notice of a lost lock.
type naiveGrant struct {
	token     uint64
	validFrom time.Time
	validity  time.Duration
}

func (g *naiveGrant) Token() uint64           { return g.token }
func (g *naiveGrant) ValidFrom() time.Time    { return g.validFrom }
func (g *naiveGrant) Validity() time.Duration { return g.validity }
func (g *naiveGrant) Lost() <-chan error      { return nil }

// NaiveRedisPrefix starts the keys of the naive Redis recipe.
const NaiveRedisPrefix = "naive:"

// naiveRedis is the Redis lock of many hand-written implementations:
//
//   - acquire is SET key owner NX PX ttl. A retry after a lost reply finds
//     the caller's own key and reports "locked": the caller is blocked by
//     itself, and the key is an orphan until it expires;
//   - the token is the client's own sequence number (1, 2, 3…), so two
//     clients hand out the same tokens;
//   - renew is PEXPIRE and release is DEL, whoever holds the key.
type naiveRedis struct {
	rdb *redis.Client
	seq atomic.Uint64
}

func naiveRedisKey(key string) string { return NaiveRedisPrefix + key }

func (d *naiveRedis) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	key := naiveRedisKey(req.Key)
	for {
		sent := time.Now()
		ok, err := d.rdb.SetNX(ctx, key, req.Owner, req.TTL).Result()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: naive redis: %v", driver.ErrUnavailable, err)
		}
		if ok {
			return &naiveRedisGrant{naiveGrant: naiveGrant{token: d.seq.Add(1), validFrom: sent, validity: req.TTL}, d: d, key: key}, nil
		}
		if !req.Wait {
			return nil, fmt.Errorf("%w: naive redis: key %q is set", driver.ErrLocked, key)
		}
		if err := backoff.Sleep(ctx, 20*time.Millisecond); err != nil { // the recipe polls
			return nil, err
		}
	}
}

func (d *naiveRedis) Close() error { return d.rdb.Close() }

type naiveRedisGrant struct {
	naiveGrant
	d   *naiveRedis
	key string
}

func (g *naiveRedisGrant) Renew(ctx context.Context) error {
	ok, err := g.d.rdb.PExpire(ctx, g.key, g.validity).Result()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: naive redis: key gone", driver.ErrNotHeld)
	}
	return nil
}

func (g *naiveRedisGrant) Release(ctx context.Context) error {
	n, err := g.d.rdb.Del(ctx, g.key).Result()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: naive redis: key gone", driver.ErrNotHeld)
	}
	return nil
}

// NaiveZKRoot is the node under which the naive ZooKeeper recipe works.
const NaiveZKRoot = "/naive"

// naiveZK is a ZooKeeper lock written without Curator's lessons:
//
//   - acquire creates one ephemeral node of a fixed name under a parent
//     node, and retries the create after a lost reply: the retry finds the
//     caller's own node and reports "locked" (blocked by itself; the node
//     is an orphan for as long as the session lives);
//   - the token is the client's own sequence number (1, 2, 3…), so two
//     clients hand out the same tokens;
//   - release is delete(node, -1), retried: a late retry deletes the next
//     holder's node;
//   - renew is exists(node), whoever's node it is;
//   - after a session expiry it creates its nodes again on the new session
//     and carries on: a silent re-acquire.
type naiveZK struct {
	conn    *zk.Conn
	timeout time.Duration
	seq     atomic.Uint64

	mu   sync.Mutex
	held map[string]string // lock node -> owner, for the silent re-acquire
}

func newNaiveZK(servers []string, timeout time.Duration) (*naiveZK, error) {
	d := &naiveZK{timeout: timeout, held: map[string]string{}}
	var expired atomic.Bool
	conn, ev, err := zk.Connect(servers, timeout, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}),
		zk.WithHostProvider(&eagerHosts{HostProvider: zk.NewDNSHostProvider()}),
		zk.WithEventCallback(func(e zk.Event) {
			if e.Type != zk.EventSession {
				return
			}
			switch e.State {
			case zk.StateExpired:
				expired.Store(true)
			case zk.StateHasSession:
				if expired.Swap(false) {
					go d.reacquire()
				}
			}
		}))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conn = conn
	d.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == zk.StateHasSession {
				go drain(ev)
				if _, err := conn.Create(NaiveZKRoot, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					conn.Close()
					return nil, err
				}
				return d, nil
			}
		case <-deadline:
			conn.Close()
			return nil, fmt.Errorf("%w: naive zk: no session", driver.ErrUnavailable)
		}
	}
}

func drain(ch <-chan zk.Event) {
	for range ch {
	}
}

// eagerHosts never asks go-zookeeper to pause a second before it tries the
// servers again: the naive recipe reconnects at once, as zkdlock does.
type eagerHosts struct{ zk.HostProvider }

func (h *eagerHosts) Next() (string, bool) {
	s, _ := h.HostProvider.Next()
	return s, false
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func naiveZKPaths(key string) (parent, node string) {
	parent = NaiveZKRoot + "/" + strings.NewReplacer("/", "_", "%", "_").Replace(key)
	return parent, parent + "/lock"
}

func (d *naiveZK) reacquire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for node, owner := range d.held {
		parent := node[:strings.LastIndex(node, "/")]
		_, _ = d.conn.Create(parent, nil, 0, zk.WorldACL(zk.PermAll))
		_, _ = d.conn.Create(node, []byte(owner), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	}
}

func transientZK(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionExpired)
}

func (d *naiveZK) pause(ctx context.Context) error {
	return backoff.Sleep(ctx, 10*time.Millisecond)
}

func (d *naiveZK) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	parent, node := naiveZKPaths(req.Key)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := d.conn.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			if transientZK(err) {
				if err := d.pause(ctx); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		sent := time.Now()
		_, err := d.conn.Create(node, []byte(req.Owner), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		switch {
		case err == nil:
			d.mu.Lock()
			d.held[node] = req.Owner
			d.mu.Unlock()
			return &naiveZKGrant{naiveGrant: naiveGrant{token: d.seq.Add(1), validFrom: sent, validity: d.timeout}, d: d, node: node}, nil
		case errors.Is(err, zk.ErrNoNode):
			continue // the parent went: create it again
		case transientZK(err):
			if err := d.pause(ctx); err != nil {
				return nil, err
			}
			continue // retry the create, blindly
		case !errors.Is(err, zk.ErrNodeExists):
			return nil, err
		}
		if !req.Wait {
			return nil, fmt.Errorf("%w: naive zk: %s exists", driver.ErrLocked, node)
		}
		ok, _, ch, err := d.conn.ExistsW(node)
		if err != nil || !ok {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (d *naiveZK) Close() error {
	d.conn.Close()
	return nil
}

type naiveZKGrant struct {
	naiveGrant
	d    *naiveZK
	node string
}

func (g *naiveZKGrant) Renew(ctx context.Context) error {
	ok, _, err := g.d.conn.Exists(g.node)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: naive zk: %s is gone", driver.ErrNotHeld, g.node)
	}
	return nil
}

func (g *naiveZKGrant) Release(ctx context.Context) error {
	g.d.mu.Lock()
	delete(g.d.held, g.node)
	g.d.mu.Unlock()
	for {
		err := g.d.conn.Delete(g.node, -1)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrNoNode):
			return fmt.Errorf("%w: naive zk: %s is gone", driver.ErrNotHeld, g.node)
		case transientZK(err):
			if err := g.d.pause(ctx); err != nil {
				return err
			}
			continue // retry the delete, blindly
		default:
			return err
		}
	}
}
