package etcddlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// New returns a Client that takes locks through cli, an etcd client the
// program already has. Client.Close leaves cli open.
//
// New uses cli's connection with KV, Lease and Watcher of its own: a
// namespace the program has put on cli.KV, cli.Lease or cli.Watcher
// (package clientv3/namespace) does not apply to dlock's keys, which
// Options.Prefix places instead. (Writes through a namespaced KV and watches
// through a plain Watcher would never meet.)
//
// New checks that etcd answers and lets cli read the prefix, and that no
// member of the cluster runs an etcd version that revokes live leases (see
// Options.AllowUnsafeVersion); it returns errors satisfying errors.Is with
// dlock.ErrUnavailable or dlock.ErrAuth when that fails (a member that
// answers at no address counts as unavailable), with ErrUnsafeServer for
// such a version, and with dlock.ErrInvalidOption for a nil cli or a bad
// option in ClientOptions.
func New(ctx context.Context, cli *clientv3.Client, opts *Options) (*dlock.Client, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcddlock.New: nil etcd client", dlock.ErrInvalidOption)
	}
	d, err := newDriver(ctx, cli, clientv3.NewKV(cli), clientv3.NewLease(cli), clientv3.NewWatcher(cli), opts, nil, strings.Join(cli.Endpoints(), ","))
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

// etcdDriver implements driver.Driver and driver.Inspector.
type etcdDriver struct {
	kv     clientv3.KV
	kvc    pb.KVClient      // the connection's own, for the Txns built in txn.go
	lc     clientv3.Lease   // the driver's own: closed by Close
	w      clientv3.Watcher // the driver's own: closed by Close
	owned  io.Closer        // the etcd client, when Open created it
	cli    *clientv3.Client // dials the spare connection
	spare  spareConn        // for keep-alives the client's connection left unanswered (keepalive.go)
	addr   string           // for error messages
	opts   Options
	prefix string

	// ctx ends when Close starts: it interrupts waiting Acquire calls and
	// the watches of held grants.
	ctx    context.Context
	cancel context.CancelFunc

	inflight   sync.WaitGroup // Acquire calls, waited for by Close
	anchorDone chan struct{}  // closed when keepWatchStream has returned

	// beforeWatch, a test seam (export_test.go), runs in a waiter between
	// its read of the queue and the start of its watch of pred, the entry
	// it waits for. Nil outside tests.
	beforeWatch func(ctx context.Context, pred string)

	// leaseTurn is held by the call that renews or grants a lease
	// (takeLease).
	leaseTurn chan struct{}

	// busy: the queues lately found held or waited for (busy.go).
	busy busyQueues

	// ended: the entries with a lock-delay found gone (lockdelay.go).
	ended endedEntries

	mu     sync.Mutex
	leases map[int64]*etcdLease // the lease new calls use, by TTL in seconds; guarded by mu
	closed bool                 // guarded by mu
}

// newDriver checks the server through cli, whose own KV, Lease and Watcher
// are not used: kv, lc and w serve the driver.
func newDriver(ctx context.Context, cli *clientv3.Client, kv clientv3.KV, lc clientv3.Lease, w clientv3.Watcher, opts *Options, owned io.Closer, addr string) (*etcdDriver, error) {
	o := opts.withDefaults()
	dctx, cancel := context.WithCancel(context.Background())
	d := &etcdDriver{
		kv: kv, kvc: clientv3.RetryKVClient(cli), lc: lc, cli: cli, w: w, owned: owned, addr: addr, opts: o, prefix: o.Prefix,
		ctx: dctx, cancel: cancel, leaseTurn: make(chan struct{}, 1), leases: map[int64]*etcdLease{},
	}
	// Range, one key of the prefix: proves that etcd answers, has a leader
	// (the read is linearizable) and lets these credentials read there.
	start := time.Now()
	if _, err := kv.Get(ctx, d.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1)); err != nil {
		_ = d.closeClients()
		return nil, d.checkErr(ctx, err, time.Since(start))
	}
	// Before the first watch, so that a refused cluster is left as it was.
	if !o.AllowUnsafeVersion {
		if err := d.checkVersions(ctx, cli); err != nil {
			_ = d.closeClients()
			return nil, err
		}
	}
	d.anchorDone = make(chan struct{})
	go d.keepWatchStream()
	return d, nil
}

// watchCtx is the context of every watch the driver makes. They all share
// one gRPC stream, which etcd's client picks by the context's metadata.
// Requiring a leader makes a watch end with an error when its member loses
// the leader, rather than wait in silence for events that may not come.
func watchCtx(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

// anchorKey is a key dlock never writes: see keepWatchStream.
func (d *etcdDriver) anchorKey() string { return d.prefix + "\x00stream-anchor" }

// keepWatchStream holds one watch open for the driver's lifetime. etcd's
// client closes a gRPC watch stream when its last watch ends, and opens a
// new one (a new RPC, with goroutines on both sides) for the next: without
// this anchor, a client that waits for one key at a time would pay for that
// at every wait.
func (d *etcdDriver) keepWatchStream() {
	defer close(d.anchorDone)
	var b backoff
	for d.ctx.Err() == nil {
		// Watch create: a key nobody writes.
		for range d.w.Watch(watchCtx(d.ctx), d.anchorKey()) {
		}
		_ = b.wait(d.ctx) // the stream broke (no leader, lost connection)
	}
}

// checkErr explains why the first request to etcd failed after waited.
func (d *etcdDriver) checkErr(ctx context.Context, err error, waited time.Duration) error {
	if isAuthErr(err) {
		return fmt.Errorf("%w: etcd at %s: %w (check the user name and password in the URL, and that the user may read and write keys under %q)",
			driver.ErrAuth, d.addr, err, d.prefix)
	}
	if ctx.Err() != nil || transient(err) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: etcd at %s: no answer after %v: %w (check that etcd runs there and serves clients on that port, 2379 by default, and that the scheme matches the server: etcd:// for plain TCP, etcds:// for TLS)",
			driver.ErrUnavailable, d.addr, waited.Round(time.Millisecond), err)
	}
	return fmt.Errorf("etcd at %s: %w", d.addr, err)
}

// enter registers an Acquire call, failing once Close has started.
func (d *etcdDriver) enter() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return dlock.ErrClosed
	}
	d.inflight.Add(1)
	return nil
}

// Close interrupts waiting Acquire calls and waits for them to remove their
// entries, revokes the Client's leases, and closes the etcd client if Open
// created it. Held grants are not released: dlock releases them first, but
// for those in their minimum hold, whose lease is left to expire.
func (d *etcdDriver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()

	d.cancel()
	d.inflight.Wait()
	<-d.anchorDone
	// No call runs any more: the leases are those of the last ones.
	d.mu.Lock()
	var leases []*etcdLease
	for _, l := range d.leases {
		leases = append(leases, l)
	}
	clear(d.leases)
	d.mu.Unlock()
	// One deadline for all: an unreachable etcd drops the leases by itself.
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	for _, l := range leases {
		l.kill(fmt.Errorf("%w: client closed", driver.ErrNotHeld))
		if l.unused() {
			d.revokeWith(ctx, l)
		}
	}
	return d.closeClients()
}

func (d *etcdDriver) closeClients() error {
	d.cancel()
	errs := []error{d.w.Close(), d.lc.Close(), d.spare.close()}
	if d.owned != nil {
		errs = append(errs, d.owned.Close())
	}
	return errors.Join(errs...)
}

var (
	_ driver.Driver       = (*etcdDriver)(nil)
	_ driver.Inspector    = (*etcdDriver)(nil)
	_ driver.BatchRenewer = (*etcdDriver)(nil)
)
