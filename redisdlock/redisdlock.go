// Package redisdlock is the Redis backend of dlock: a fair (FIFO) lock whose
// waiters are woken one at a time by Pub/Sub, with self-renewing leases and
// fencing tokens that keep increasing even across a server restart that lost
// every key. docs/redis.md describes the algorithm.
//
// Import it to register the URL schemes used by dlock.Open:
//
//	redis://[user:password@]host:port[/db][?options]
//	rediss://…                                (TLS)
//	redis+sentinel://[user:password@]host:port[,host:port…]/master[/db][?options]
//	rediss+sentinel://…                       (TLS)
//	redis+cluster://[user:password@]host:port[,host:port…][?options]
//	rediss+cluster://…                        (TLS)
//
// The rediss schemes take cacert (PEM file of the CAs to trust instead of
// the system's), cert and key (a client certificate) and server_name, for
// every connection: to the server, the Sentinels and the master, or every
// cluster node.
//
// Options are prefix (default "dlock:"), waiter_timeout (default 3s),
// poll_interval (default waiter_timeout/3), allow_eviction (default
// false: see Options.AllowEviction), wait_replicas (default 0) and
// wait_timeout (default 100ms: see Options.WaitReplicas), plus go-redis'
// own URL options (dial_timeout, read_timeout, pool_size, …) on redis, rediss and
// redis+cluster URLs; sentinel URLs take sentinel_username and
// sentinel_password instead. See docs/redis.md.
//
// The server must run with maxmemory-policy noeviction, and its clock must
// not step: see the exceptions for Redis in the Safety section of package
// dlock.
//
// Leader election (dlock.Election) runs on the same queue: the grant
// implements driver.Publisher (Proclaim) and the driver driver.Observer
// (Observe), whose notices come by Pub/Sub on the key's own channel and,
// for a leader that dies without releasing, at its deadline: see
// docs/redis.md, "Leader election".
//
// When the data the lock protects lives in Redis too, a Fence (NewFence)
// writes it only under a token not older than the last one written: see
// docs/fencing.md, section Redis.
//
// A Client keeps go-redis from printing to stderr on its behalf: go-redis's
// logger is one per process and prints every failed dial there, so while
// its subscription cannot dial the server a Client sends nothing, except on
// a Cluster (see docs/redis.md, "Logs"). What the Client recovers from goes
// to its dlock.WithLogger logger; SetRedisLogger sends go-redis's own
// messages to an slog.Logger.
//
// Or build a Client from a go-redis client the program already has with New;
// that works unchanged with a plain client, Sentinel (redis.NewFailoverClient)
// and Cluster (redis.NewClusterClient), because every key of one lock shares a
// hash slot.
package redisdlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// New returns a Client that takes locks through rdb, which may be a
// *redis.Client, *redis.ClusterClient, *redis.Ring-free UniversalClient such
// as a Sentinel failover client. Client.Close leaves rdb open.
//
// New checks that the server answers, that its maxmemory-policy cannot evict
// lock keys (see Options.AllowEviction), and subscribes to the client's
// notification channel; it returns errors satisfying errors.Is with
// dlock.ErrUnavailable or dlock.ErrAuth when that fails, with
// ErrUnsafeServer for an evicting policy, and with dlock.ErrInvalidOption
// for Options out of range or a bad option in ClientOptions.
//
// Set ContextTimeoutEnabled in rdb's options so that cancelling a Lock
// interrupts a request blocked on a dead connection at once, rather than
// after the read timeout, and so that a renewal on a connection gone silent
// is retried on another one while the lease lasts.
//
// Script calls that overlap are sent through rdb as pipelines (a lone call
// as a plain request): rdb's hooks see them in ProcessPipelineHook. See
// docs/redis.md, "Calls that overlap".
func New(ctx context.Context, rdb redis.UniversalClient, opts *Options) (*dlock.Client, error) {
	d, err := newDriver(ctx, rdb, opts, false, clientAddr(rdb))
	if err != nil {
		return nil, err
	}
	c, err := dlock.NewClient(d, d.opts.ClientOptions...)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return c, nil
}

// redisDriver implements driver.Driver and driver.Inspector.
type redisDriver struct {
	rdb     redis.UniversalClient
	ownsRDB bool   // close rdb on Close: it was opened from a URL
	addr    string // for error messages
	opts    Options
	prefix  string
	notify  *notifier
	pipe    *pipe  // sends the scripts
	log     *logTo // the Client's logger

	// Script arguments that never change, boxed once.
	waiterTimeoutArg, channelArg any

	keys *keyCache // lockKeys of recent user keys
}

func newDriver(ctx context.Context, rdb redis.UniversalClient, opts *Options, owns bool, addr string) (*redisDriver, error) {
	o, err := opts.withDefaults()
	if err == nil {
		err = checkWaitTimeout(rdb, o)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: redisdlock.Options: %w", dlock.ErrInvalidOption, err)
	}
	if err := reach(ctx, rdb); err != nil {
		return nil, wrapErr(fmt.Sprintf("redis at %s", addr), err)
	}
	// Before subscribing, so that a refused server is left as it was.
	if !o.AllowEviction {
		if err := checkEviction(ctx, rdb, addr); err != nil {
			return nil, err
		}
	}
	log := &logTo{}
	var id [12]byte
	_, _ = rand.Read(id[:])
	channel := o.Prefix + "notify:" + hex.EncodeToString(id[:])
	n, err := newNotifier(ctx, rdb, channel, log)
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("redis at %s: subscribe", addr), err)
	}
	return &redisDriver{rdb: rdb, pipe: newPipe(rdb), ownsRDB: owns, addr: addr, opts: o, prefix: o.Prefix, notify: n, log: log,
		waiterTimeoutArg: ms(o.WaiterTimeout), channelArg: channel, keys: &keyCache{seed: maphash.MakeSeed()}}, nil
}

// reach checks that the server answers and takes the credentials, on a
// connection of its own dialled as a subscription's is: around go-redis'
// connection pool, which prints every failed dial to stderr (see
// notifier.unreachable). A server that is down then fails New quietly.
func reach(ctx context.Context, rdb redis.UniversalClient) error {
	ps := rdb.Subscribe(ctx)
	defer ps.Close()
	err := ps.Ping(ctx)
	if err == nil {
		_, err = ps.Receive(ctx) // the pong
	}
	// The server's refusal as the pool reports it: without the "failed to
	// authenticate" that this path adds to a WRONGPASS.
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return rerr
	}
	return err
}

// Close stops the notification subscription, and closes the Redis client
// if the driver opened it.
func (d *redisDriver) Close() error {
	err := d.notify.close()
	if d.ownsRDB {
		if cerr := d.rdb.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// ms renders a duration as whole milliseconds for a script argument, rounding
// up so that the server never keeps a lease for less than asked.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

var (
	_ driver.Inspector    = (*redisDriver)(nil)
	_ driver.BatchRenewer = (*redisDriver)(nil)
)

// clientAddr names the server(s) of a go-redis client for error messages.
func clientAddr(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T", rdb)
}
