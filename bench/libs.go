package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/redisdlock"
	_ "github.com/dlockdev/dlock/zkdlock" // registers zk:// for dlock.Open
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// pollDelay is the retry delay given to the polling peers (redsync and
// bsm/redislock): small, so that they hand off quickly, at the price of the
// server work it causes — both show in the tables.
const pollDelay = time.Millisecond

// contender is one client with its own connection, contending for one key.
type contender interface {
	// Lock waits until the key is held, or ctx ends.
	Lock(ctx context.Context) error
	// Unlock releases the key.
	Unlock(ctx context.Context) error
	// Close closes the connection.
	Close()
}

// multi is one client (one connection, or one connection pool) taking many
// locks at once, for the scale tests.
type multi interface {
	// Lock waits for key and returns the function that releases it.
	Lock(ctx context.Context, key string) (func(context.Context) error, error)
	Close()
}

// library is one lock implementation on one backend.
type library struct {
	Name    string // as shown in the tables
	Backend string // redis, zookeeper, etcd
	Module  string // Go module whose version the report shows
	Waiting string // how a waiter learns that the lock is free
	// Missing is why the library cannot run here (empty when it can).
	Missing string
	// IsDlock marks dlock's own backends.
	IsDlock bool

	newContender func(ctx context.Context, env *env, key string) (contender, error)
	// newMulti makes a client for the scale tests; perLock asks for
	// whatever per-waiter resource the library needs to queue many waiters
	// on one key from one client (an etcd session per Mutex).
	newMulti func(ctx context.Context, env *env, longTTL time.Duration, perLock bool) (multi, error)
}

// env is the running servers and the request counters of the clients.
type env struct {
	redisAddr string
	zkAddr    string
	etcdAddr  string

	// redisRequests counts the requests that the Redis clients of the
	// benchmark send (a script call counts once), by a go-redis hook or a
	// rueidis wrapper.
	redisRequests atomic.Int64
}

// libraries lists every library in the order of the tables.
func libraries() []*library {
	libs := []*library{
		{
			Name: "dlock (redis)", Backend: "redis", Module: "github.com/dlockdev/dlock", IsDlock: true,
			Waiting:      "FIFO queue in Redis; the release script hands the lock to the next waiter and PUBLISHes one message to that waiter's client channel; waiters also poll every 1 s (PollInterval, fallback)",
			newContender: newDlockRedis,
			newMulti:     newDlockRedisMulti,
		},
		{
			Name: "redsync", Backend: "redis", Module: "github.com/go-redsync/redsync/v4",
			Waiting:      fmt.Sprintf("polling: SET NX every %v (WithRetryDelay(%v), unlimited WithTries); a failed try also sends the release script", pollDelay, pollDelay),
			newContender: newRedsync,
			newMulti:     newRedsyncMulti,
		},
		{
			Name: "bsm/redislock", Backend: "redis", Module: "github.com/bsm/redislock",
			Waiting:      fmt.Sprintf("polling: the obtain script every %v (RetryStrategy LinearBackoff(%v))", pollDelay, pollDelay),
			newContender: newRedislock,
			newMulti:     newRedislockMulti,
		},
		{
			Name: "rueidislock", Backend: "redis", Module: "github.com/redis/rueidis",
			Waiting:      "client-side caching: every waiting Locker tracks the key (CLIENT TRACKING) and retries SET NX on its invalidation, so a release wakes every waiter (KeyMajority 1 and NoLoopTracking, as its README advises for one server; TryNextAfter 10 s, see the notes)",
			newContender: newRueidislock,
			newMulti:     newRueidislockMulti,
		},
		{
			Name: "dlock (zookeeper)", Backend: "zookeeper", Module: "github.com/dlockdev/dlock", IsDlock: true,
			Waiting:      "ephemeral sequential node per waiter; each watches only its predecessor, so a release wakes one waiter",
			newContender: newDlockZK,
			newMulti:     newDlockZKMulti,
		},
		{
			Name: "go-zookeeper Lock", Backend: "zookeeper", Module: "github.com/go-zookeeper/zk",
			Waiting:      "ephemeral sequential node per waiter (protected create); each watches its predecessor with GetW, so a release wakes one waiter",
			newContender: newZKLock,
			newMulti:     newZKLockMulti,
		},
		dlockEtcdLibrary(),
		{
			Name: "etcd Mutex", Backend: "etcd", Module: "go.etcd.io/etcd/client/v3",
			Waiting:      "key per session lease under the prefix; a waiter watches the deletion of the key created just before its own, from the revision of its Get (WithRev)",
			newContender: newEtcdMutex,
			newMulti:     newEtcdMutexMulti,
		},
	}
	return libs
}

// ---- go-redis clients with a request counter ----

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func newGoRedis(e *env) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  e.redisAddr,
		ContextTimeoutEnabled: true,
		PoolSize:              32,
	})
	rdb.AddHook(countHook{&e.redisRequests})
	return rdb
}

// ---- dlock ----

type dlockContender struct {
	c     *dlock.Client
	key   string
	lease *dlock.Lease
	close func()
}

func (d *dlockContender) Lock(ctx context.Context) error {
	l, err := d.c.Lock(ctx, d.key)
	if err != nil {
		return err
	}
	d.lease = l
	return nil
}

func (d *dlockContender) Unlock(ctx context.Context) error {
	l := d.lease
	d.lease = nil
	if l == nil {
		return errors.New("not held")
	}
	return l.Unlock(ctx)
}

func (d *dlockContender) Close() {
	_ = d.c.Close()
	if d.close != nil {
		d.close()
	}
}

type dlockMulti struct {
	c     *dlock.Client
	opts  []dlock.LockOption
	close func()
	// queueLen, if set, counts the waiters on key more cheaply than
	// Inspect, which on ZooKeeper reads every node of the queue.
	queueLen func(ctx context.Context, key string) (int, error)
}

func (d *dlockMulti) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := d.c.Lock(ctx, key, d.opts...)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockMulti) Close() {
	_ = d.c.Close()
	if d.close != nil {
		d.close()
	}
}

func newDlockRedisClient(ctx context.Context, e *env) (*dlock.Client, func(), error) {
	rdb := newGoRedis(e)
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return c, func() { _ = rdb.Close() }, nil
}

func newDlockRedis(ctx context.Context, e *env, key string) (contender, error) {
	c, closeRDB, err := newDlockRedisClient(ctx, e)
	if err != nil {
		return nil, err
	}
	return &dlockContender{c: c, key: key, close: closeRDB}, nil
}

func newDlockRedisMulti(ctx context.Context, e *env, ttl time.Duration, _ bool) (multi, error) {
	c, closeRDB, err := newDlockRedisClient(ctx, e)
	if err != nil {
		return nil, err
	}
	return &dlockMulti{c: c, opts: []dlock.LockOption{dlock.WithTTL(ttl)}, close: closeRDB}, nil
}

// zkURL is the dlock URL of the ZooKeeper server; the session timeout is the
// lease length there.
func zkURL(e *env, session time.Duration) string {
	return fmt.Sprintf("zk://%s/dlock-bench?session_timeout=%s", e.zkAddr, session)
}

func newDlockZK(ctx context.Context, e *env, key string) (contender, error) {
	c, err := dlock.Open(ctx, zkURL(e, 10*time.Second))
	if err != nil {
		return nil, err
	}
	return &dlockContender{c: c, key: key}, nil
}

func newDlockZKMulti(ctx context.Context, e *env, ttl time.Duration, _ bool) (multi, error) {
	c, err := dlock.Open(ctx, zkURL(e, ttl))
	if err != nil {
		return nil, err
	}
	// The queue is counted with one listing on a connection of its own, as
	// for go-zookeeper's Lock (Inspect would read every node). The
	// connection is opened at the first count, so that a client that never
	// counts has one session only (the renewal section counts its pings).
	var zc *zk.Conn
	count := func(_ context.Context, key string) (int, error) {
		if zc == nil {
			var err error
			if zc, err = zkConnect(e, ttl); err != nil {
				return 0, err
			}
		}
		ch, _, err := zc.Children("/dlock-bench/" + key)
		if err != nil && err != zk.ErrNoNode {
			return 0, err
		}
		return max(len(ch)-1, 0), nil
	}
	closeZC := func() {
		if zc != nil {
			zc.Close()
		}
	}
	return &dlockMulti{c: c, close: closeZC, queueLen: count}, nil
}

// ---- redsync ----

type redsyncContender struct {
	rdb *redis.Client
	m   *redsync.Mutex
}

func redsyncMutex(rs *redsync.Redsync, key string, expiry time.Duration) *redsync.Mutex {
	return rs.NewMutex("redsync:"+key,
		redsync.WithExpiry(expiry),
		redsync.WithTries(math.MaxInt32),
		redsync.WithRetryDelay(pollDelay))
}

func newRedsync(_ context.Context, e *env, key string) (contender, error) {
	rdb := newGoRedis(e)
	rs := redsync.New(redsyncgoredis.NewPool(rdb))
	return &redsyncContender{rdb: rdb, m: redsyncMutex(rs, key, 10*time.Second)}, nil
}

func (r *redsyncContender) Lock(ctx context.Context) error { return r.m.LockContext(ctx) }

func (r *redsyncContender) Unlock(ctx context.Context) error {
	ok, err := r.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

func (r *redsyncContender) Close() { _ = r.rdb.Close() }

type redsyncMulti struct {
	rdb *redis.Client
	rs  *redsync.Redsync
	ttl time.Duration
}

func newRedsyncMulti(_ context.Context, e *env, ttl time.Duration, _ bool) (multi, error) {
	rdb := newGoRedis(e)
	return &redsyncMulti{rdb: rdb, rs: redsync.New(redsyncgoredis.NewPool(rdb)), ttl: ttl}, nil
}

func (r *redsyncMulti) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := redsyncMutex(r.rs, key, r.ttl)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
}

func (r *redsyncMulti) Close() { _ = r.rdb.Close() }

// ---- bsm/redislock ----

type redislockContender struct {
	rdb *redis.Client
	c   *redislock.Client
	key string
	l   *redislock.Lock
}

var redislockOpts = &redislock.Options{RetryStrategy: redislock.LinearBackoff(pollDelay)}

func newRedislock(_ context.Context, e *env, key string) (contender, error) {
	rdb := newGoRedis(e)
	return &redislockContender{rdb: rdb, c: redislock.New(rdb), key: key}, nil
}

func (r *redislockContender) Lock(ctx context.Context) error {
	l, err := r.c.Obtain(ctx, "redislock:"+r.key, 10*time.Second, redislockOpts)
	if err != nil {
		return err
	}
	r.l = l
	return nil
}

func (r *redislockContender) Unlock(ctx context.Context) error {
	l := r.l
	r.l = nil
	return l.Release(ctx)
}

func (r *redislockContender) Close() { _ = r.rdb.Close() }

type redislockMulti struct {
	rdb *redis.Client
	c   *redislock.Client
	ttl time.Duration
}

func newRedislockMulti(_ context.Context, e *env, ttl time.Duration, _ bool) (multi, error) {
	rdb := newGoRedis(e)
	return &redislockMulti{rdb: rdb, c: redislock.New(rdb), ttl: ttl}, nil
}

func (r *redislockMulti) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := r.c.Obtain(ctx, "redislock:"+key, r.ttl, redislockOpts)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (r *redislockMulti) Close() { _ = r.rdb.Close() }

// ---- rueidislock ----

// countingRueidis counts the requests a rueidis client sends.
type countingRueidis struct {
	rueidis.Client
	n *atomic.Int64
}

func (c countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingRueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}

func newRueidisLocker(e *env, validity time.Duration) (rueidislock.Locker, error) {
	return rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{e.redisAddr}},
		KeyMajority:    1,
		NoLoopTracking: true,
		KeyValidity:    validity,
		// The default of 20 ms strands waiters on a loaded machine (see
		// rueidislock_repro_test.go); with one key (KeyMajority 1) this only
		// bounds the wait for an acquire reply.
		TryNextAfter: 10 * time.Second,
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return countingRueidis{Client: c, n: &e.redisRequests}, nil
		},
	})
}

type rueidisContender struct {
	l      rueidislock.Locker
	key    string
	cancel context.CancelFunc
}

func newRueidislock(_ context.Context, e *env, key string) (contender, error) {
	l, err := newRueidisLocker(e, 0)
	if err != nil {
		return nil, err
	}
	return &rueidisContender{l: l, key: key}, nil
}

func (r *rueidisContender) Lock(ctx context.Context) error {
	// The lock's own context is derived from the one given here, and a lock
	// outlives this call: pass a context that lasts.
	_, cancel, err := r.l.WithContext(context.WithoutCancel(ctx), r.key)
	if err != nil {
		return err
	}
	r.cancel = cancel
	return nil
}

func (r *rueidisContender) Unlock(context.Context) error {
	r.cancel() // releases the lock and waits until the release is done
	r.cancel = nil
	return nil
}

func (r *rueidisContender) Close() { r.l.Close() }

type rueidisMulti struct{ l rueidislock.Locker }

func newRueidislockMulti(_ context.Context, e *env, ttl time.Duration, _ bool) (multi, error) {
	l, err := newRueidisLocker(e, ttl)
	if err != nil {
		return nil, err
	}
	return &rueidisMulti{l: l}, nil
}

func (r *rueidisMulti) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	_, cancel, err := r.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { cancel(); return nil }, nil
}

func (r *rueidisMulti) Close() { r.l.Close() }

// ---- go-zookeeper ----

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// zkConnect connects and waits (up to 20 s) until the session is
// established, so that a contender starts with a working session.
func zkConnect(e *env, session time.Duration, opts ...func(*zk.Conn)) (*zk.Conn, error) {
	c, events, err := zk.Connect([]string{e.zkAddr}, session, zk.WithLogger(nopLogger{}), func(c *zk.Conn) {
		for _, o := range opts {
			o(c)
		}
	})
	if err != nil {
		return nil, err
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c, nil
			}
		case <-timeout:
			c.Close()
			return nil, errors.New("zk: no session within 20 s")
		}
	}
}

type zkContender struct {
	conn *zk.Conn
	l    *zk.Lock
}

func newZKLock(_ context.Context, e *env, key string) (contender, error) {
	c, err := zkConnect(e, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return &zkContender{conn: c, l: zk.NewLock(c, "/zk-bench/"+key, zk.WorldACL(zk.PermAll))}, nil
}

// Lock cannot be cancelled: go-zookeeper's Lock takes no context. A run
// that ends lets the waiters through one by one (each releases at once),
// and Close of the connection ends any still waiting.
func (z *zkContender) Lock(context.Context) error { return z.l.Lock() }

func (z *zkContender) Unlock(context.Context) error { return z.l.Unlock() }

func (z *zkContender) Close() { z.conn.Close() }

type zkMulti struct{ conn *zk.Conn }

func newZKLockMulti(_ context.Context, e *env, ttl time.Duration, _ bool) (multi, error) {
	c, err := zkConnect(e, ttl)
	if err != nil {
		return nil, err
	}
	return &zkMulti{conn: c}, nil
}

func (z *zkMulti) Lock(_ context.Context, key string) (func(context.Context) error, error) {
	l := zk.NewLock(z.conn, "/zk-bench/"+key, zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return l.Unlock() }, nil
}

func (z *zkMulti) Close() { z.conn.Close() }

// ---- etcd concurrency.Mutex ----

func etcdClient(e *env) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{e.etcdAddr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// etcdSession opens an etcd client with a session of its own (TTL 10 s,
// kept alive past ctx), as etcd's Mutex and Election want one per
// contender; the client is closed if the session cannot start.
func etcdSession(ctx context.Context, e *env) (*clientv3.Client, *concurrency.Session, error) {
	cli, err := etcdClient(e)
	if err != nil {
		return nil, nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return cli, s, nil
}

type etcdContender struct {
	cli *clientv3.Client
	s   *concurrency.Session
	m   *concurrency.Mutex
}

func newEtcdMutex(ctx context.Context, e *env, key string) (contender, error) {
	cli, s, err := etcdSession(ctx, e)
	if err != nil {
		return nil, err
	}
	return &etcdContender{cli: cli, s: s, m: concurrency.NewMutex(s, "/etcd-bench/"+key)}, nil
}

func (c *etcdContender) Lock(ctx context.Context) error   { return c.m.Lock(ctx) }
func (c *etcdContender) Unlock(ctx context.Context) error { return c.m.Unlock(ctx) }
func (c *etcdContender) Close() {
	_ = c.s.Close()
	_ = c.cli.Close()
}

type etcdMulti struct {
	cli     *clientv3.Client
	ttl     int
	shared  *concurrency.Session // nil: a session per Lock
	perLock bool
}

func newEtcdMutexMulti(_ context.Context, e *env, ttl time.Duration, perLock bool) (multi, error) {
	cli, err := etcdClient(e)
	if err != nil {
		return nil, err
	}
	m := &etcdMulti{cli: cli, ttl: int(ttl / time.Second), perLock: perLock}
	if !perLock {
		// Distinct keys: one session (one lease) serves every Mutex, as
		// etcd intends.
		if m.shared, err = concurrency.NewSession(cli, concurrency.WithTTL(m.ttl)); err != nil {
			_ = cli.Close()
			return nil, err
		}
	}
	return m, nil
}

func (m *etcdMulti) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	s := m.shared
	if m.perLock {
		// Many waiters on one key need one session each: a Mutex's key is
		// the prefix plus the session's lease id.
		var err error
		if s, err = concurrency.NewSession(m.cli, concurrency.WithTTL(m.ttl)); err != nil {
			return nil, err
		}
	}
	mu := concurrency.NewMutex(s, "/etcd-bench/"+key)
	if err := mu.Lock(ctx); err != nil {
		if m.perLock {
			_ = s.Close()
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		err := mu.Unlock(ctx)
		if m.perLock {
			_ = s.Close()
		}
		return err
	}, nil
}

func (m *etcdMulti) Close() {
	if m.shared != nil {
		_ = m.shared.Close()
	}
	_ = m.cli.Close()
}

func clientv3WithPrefixCount() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}
