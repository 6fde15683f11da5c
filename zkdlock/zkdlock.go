// Package zkdlock is the ZooKeeper backend of dlock: the lock recipe of
// Apache Curator's InterProcessMutex on go-zookeeper/zk. Every contender
// creates an ephemeral sequential node under the key's node; the lowest
// holds the key, and every other one watches only the node just before its
// own, so a release wakes exactly one waiter, in arrival order.
// Semaphores and read-write locks use the same queue: each node's name
// carries its kind and mode, every client applies dlock's grant rule to one
// listing, and each waiter watches the one node (or, a semaphore's first
// waiter, the key node's children) whose change can grant it. An election
// is the same queue of kind "election": its leader publishes by writing its
// own node (grant.Publish), and observers follow the key with watches
// (Watch). docs/zookeeper.md describes the recipe and the node layout.
//
// Import it to register the URL schemes used by dlock.Open:
//
//	zk://[user:password@]host1:2181[,host2:2181…][/root][?session_timeout=10s&connect_timeout=5s&tick_time=2s|standalone=true]
//	zks://…[?…&cacert=ca.pem&cert=client.pem&key=client-key.pem&server_name=name]
//
// zks:// speaks TLS to ZooKeeper's secure client port: cacert is a PEM file
// of the CAs to trust instead of the system's, cert and key a client
// certificate, server_name the name to verify instead of the URL's host.
//
// The path is the root node under which dlock keeps one node per key
// (default DefaultRoot); user and password enable digest authentication, and
// the nodes dlock creates then carry an ACL that lets only that user change
// or delete them (everybody may read them, to inspect locks).
//
// Or build a Client from a zk.Conn the program already has with New.
//
// go-zookeeper's messages about a connection made by Open (failed dials,
// broken connections) go to the Client's dlock.WithLogger logger at level
// Warn, and are dropped without one; a zk.Conn given to New logs where its
// zk.WithLogger says.
//
// # Lease length
//
// On ZooKeeper the lease length is the session timeout, not the TTL given
// with dlock.WithTTL: the server deletes a holder's node when the holder's
// session expires, not before, and one session serves every lease of a
// Client. Set session_timeout in the URL (or the timeout given to zk.Connect,
// with Options.SessionTimeout) instead: dlock.WithTTL of any other length is
// refused with dlock.ErrInvalidOption, by Open, New, Lock, TryLock and Do,
// rather than ignored; WithTTL of the session timeout itself is accepted. Each renewal (about every third of
// the session timeout) is a round trip through the leader, one for all the
// leases of the Client, that checks that each holder's node still exists,
// unwritten, and belongs to the Client's current session: through the
// node's watch, or a read of the node where the watch cannot prove it.
//
// # Connection loss
//
// A lease survives losing the connection as long as the Client gets it back
// (to any server of the ensemble, keeping its session) and renews before the
// local deadline: the session timeout, less 1% and 2 ms, counted from the
// start of the renewal before the last successful one — the last one the
// leader, which alone expires sessions, is known to have heard of: it hears
// of a follower's clients only with the follower's replies to its pings,
// every half tick (tick_time; see docs/zookeeper.md). On a standalone server
// (detected by itself, see Detect, or stated with standalone=true), from the
// start of the last successful renewal. Otherwise the lease is lost at that
// deadline, which is before the server can expire the session and give the
// key to somebody else. When the Client learns that its session expired, or
// that its node was deleted, every lease concerned is lost at once. A lease
// lost at its deadline while the session lives on (the reconnect came in
// time) does not keep the key: its node is deleted once the connection is
// back, Unlock or not. A renewal unanswered within half of what is left
// of its lease drops the connection, on a Client of Open, so that it is
// retried on a new one before the deadline (a connection can go silent while
// new ones work). An Unlock whose reply was lost is sent again on the same
// session after the reconnect, and returns nil when the node is gone;
// dlock.ErrUnavailable only when the session ended or nothing answered. A
// waiting Lock keeps its place through connection loss, and joins the end of
// the queue again if its session expired.
//
// # Fenced writes
//
// For data kept in ZooKeeper itself, MultiHeld runs a Multi that commits only
// while the lease still holds its key on the server (CheckHeld gives the
// check op for a Multi of your own): a holder paused past its session
// timeout gets dlock.ErrStaleToken, and nothing is written.
// docs/fencing.md, section ZooKeeper says what it guarantees and what it does not.
//
// # Revoke and lock-delay
//
// The driver implements driver.Revoker: a revoke deletes the holders' nodes
// (one multi, from the revoking Client's session), the revoked lease ends at
// once through its node's watch, and the waiter behind is granted as after
// an expiry, with a greater token. An entry with a lock-delay keeps a
// persistent mark beside its node, which a release deletes with the node;
// a mark left without its node delays the next grant by its delay, counted
// from the moment the first Client to see the mark saw it (it writes the
// time the delay ends into the mark), and every Client that saw it and
// lives deletes it then. Every mark has an entry in an index of the root,
// which every Client sweeps (Options.LockDelaySweep), so a mark whose
// Client died goes too, though nobody looks at its key again, while any
// Client of the root runs. Locks without a delay pay nothing for it.
// docs/zookeeper.md, section Revoke and lock-delay, has the details.
package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Conn is the part of *zk.Conn that zkdlock uses. Tests wrap a *zk.Conn in
// it to inject faults.
type Conn interface {
	Children(path string) ([]string, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	CreateContainer(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Delete(path string, version int32) error
	Exists(path string) (bool, *zk.Stat, error)
	ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error)
	Get(path string) ([]byte, *zk.Stat, error)
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
	GetACL(path string) ([]zk.ACL, *zk.Stat, error)
	Sync(path string) (string, error)
	Multi(ops ...any) ([]zk.MultiResponse, error)
	SessionID() int64
}

var _ Conn = (*zk.Conn)(nil)

// New returns a Client that takes locks through conn, sharing its session
// between all leases. opts.SessionTimeout is required: see Options.
// Client.Close leaves conn open; grants are released first, and so is a
// lease in its minimum hold (dlock.HoldAtLeast), which the server would
// otherwise keep for as long as conn's session lives.
//
// New creates the root node if it is missing, and returns errors satisfying
// errors.Is with dlock.ErrInvalidOption (Options out of range, or a WithTTL
// in ClientOptions other than SessionTimeout), dlock.ErrUnavailable or
// dlock.ErrAuth.
func New(ctx context.Context, conn Conn, opts *Options) (*dlock.Client, error) {
	o, err := opts.withDefaults(true)
	if err != nil {
		return nil, err
	}
	timeout := o.SessionTimeout
	addr := "the zk.Conn given to New"
	if s, ok := conn.(interface{ Server() string }); ok && s.Server() != "" {
		addr = s.Server() // *zk.Conn: the server it is connected to
	}
	d := newDriver(conn, o, addr, func() time.Duration { return timeout }, nil)
	if err := d.init(ctx, nil); err != nil {
		_ = d.Close()
		return nil, err
	}
	c, err := dlock.NewClient(d, o.ClientOptions...)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return c, nil
}

// zkDriver implements driver.Driver, driver.Inspector and driver.Revoker
// on one session.
type zkDriver struct {
	conn      Conn
	closeConn func()    // closes conn if the driver opened it; nil otherwise
	zkLog     *zkLogger // the logger of conn if the driver opened it; nil otherwise
	addr      string    // the servers, for error messages
	root      string
	acl       []zk.ACL
	timeout   func() time.Duration // the session timeout, which is the lease length
	// conns counts the connections of conn that got a session, when the
	// driver dialed them (see connGen); nil with a conn given to New.
	conns *atomic.Uint64
	// dropConn closes connection number gen (see connGen) if the Conn is
	// still on it; nil with a conn given to New.
	dropConn func(gen uint64)

	// ctx is cancelled by Close, which stops the janitors.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool // guarded by mu
	janitors sync.WaitGroup
	reaping  sync.Map // paths of the marks a janitor will delete (lockdelay.go's reapMark)

	// sweepEvery is how often the index of lock-delay marks is swept
	// (delayindex.go), and stopSweep stops the sweeper (guarded by mu).
	sweepEvery time.Duration
	stopSweep  context.CancelFunc

	// heard is what the server that expires the session (the leader) is
	// known to have heard from it, and when the latest request that the
	// server answered was sent.
	heard *heard

	// checking is set while the Client makes the standalone check (see
	// checkStandalone): from the start with Deployment Detect and no
	// tick, until an answer shows an ensemble.
	checking atomic.Bool

	// waiters counts the attempts waiting for a notification that may
	// grant them without a listing, and freshening is set while keepFresh
	// runs for them; both guarded by freshMu.
	freshMu    sync.Mutex
	waiters    int
	freshening bool

	// listNext and listBusy coalesce listings (see listing): the listing
	// of a key node to send when the one in flight returns, and the key
	// nodes with one in flight.
	listMu   sync.Mutex
	listNext map[string]*listing // guarded by listMu
	listBusy map[string]bool     // guarded by listMu

	// hints holds what the last listing of this Client showed of a key
	// (see keyHint), for up to maxHints keys. Hints only: a wrong guess
	// costs a request, a spurious notification, or (see attempt.queue) a
	// node created and deleted again.
	hintMu sync.Mutex
	hints  map[string]keyHint // guarded by hintMu

	ttlHint atomic.Pointer[ttlHint] // FixedTTL's, for the last timeout seen
}

var _ driver.Logging = (*zkDriver)(nil)

// SetLogger implements driver.Logging: go-zookeeper's messages about the
// connection the driver opened go to l. A conn given to New keeps the
// logger it was created with (zk.WithLogger).
func (d *zkDriver) SetLogger(l *slog.Logger) {
	if d.zkLog != nil {
		d.zkLog.l.Store(l)
	}
}

// keyHint is what the last listing of a key by this Client showed.
type keyHint struct {
	// free: the attempt's node was alone in the queue. The next attempt
	// on the key sets a child watch with its listing, instead of an
	// exists watch on its node, which saves a request when the key is
	// still free; and creates its node without listing the queue first.
	free bool
	// label is the kind the key was in use as (the first node's): the
	// next attempt of that kind creates its node without listing the
	// queue first, as the key is most likely in use as that kind still.
	label string
	// gone: a release of this Client deleted the key node with its lock
	// node (see grant.remove). The next attempt makes the key node before
	// its create, without listing the queue first: there was none.
	gone bool
	// keep: the key node was made again after gone (the key is in use
	// again), or a lone holder's release found it not empty (the key is
	// in use by others). This Client's lone holders then leave it to the
	// server's container reaper: a key locked over and over costs no
	// createContainer per cycle, nor a contended key a refused delete.
	keep bool
}

// maxHints bounds the hints.
const maxHints = 1024

// setHint records what a listing of keyPath showed: q, in which the
// attempt's own node is alone when free.
func (d *zkDriver) setHint(keyPath string, q []lockNode, free bool) {
	d.hintMu.Lock()
	defer d.hintMu.Unlock()
	if len(q) == 0 {
		delete(d.hints, keyPath)
		return
	}
	if d.hints == nil || len(d.hints) >= maxHints {
		d.hints = make(map[string]keyHint)
	}
	d.hints[keyPath] = keyHint{free: free, label: q[0].label, keep: d.hints[keyPath].keep}
}

// setGone records that a release of this Client deleted the node of
// keyPath (see keyHint.gone).
func (d *zkDriver) setGone(keyPath string) {
	d.hintMu.Lock()
	defer d.hintMu.Unlock()
	if d.hints == nil || len(d.hints) >= maxHints {
		d.hints = make(map[string]keyHint)
	}
	h := d.hints[keyPath]
	d.hints[keyPath] = keyHint{label: h.label, gone: true, keep: h.keep}
}

// setKeep records that the key node of keyPath is to be left to the
// server's reaper by this Client's lone holders (see keyHint.keep).
func (d *zkDriver) setKeep(keyPath string) {
	d.hintMu.Lock()
	defer d.hintMu.Unlock()
	if h, ok := d.hints[keyPath]; ok {
		h.gone, h.keep = false, true
		d.hints[keyPath] = h
	}
}

func (d *zkDriver) hint(keyPath string) keyHint {
	d.hintMu.Lock()
	defer d.hintMu.Unlock()
	return d.hints[keyPath]
}

func (d *zkDriver) wasFree(keyPath string) bool { return d.hint(keyPath).free }

// noteAlive records that a request sent at sent on session sid was
// answered (now, or a little before). sid is the session read before
// sending; the caller checks nothing else: a session id never comes back,
// so a reply on a later session only makes the record older than it could
// be.
func (d *zkDriver) noteAlive(sid int64, sent time.Time) {
	if sid == 0 || sid != d.conn.SessionID() {
		return
	}
	d.heard.answered(sid, sent, time.Now())
}

// noteViaLeader records that a request sent at sent on session sid, which
// the server forwards to the leader (a sync, a write), succeeded; it was
// answered too. See heard.
func (d *zkDriver) noteViaLeader(sid int64, sent time.Time) {
	d.noteAlive(sid, sent)
	if sid != 0 && sid == d.conn.SessionID() {
		d.heard.viaLeader(sid, sent)
	}
}

// aliveSince returns the moment the latest answered request of session sid
// was sent.
func (d *zkDriver) aliveSince(sid int64) (time.Time, bool) {
	sent, _, ok := d.heard.last(sid)
	return sent, ok
}

// lag bounds how long after a request the leader has heard of it: 0 when
// the server expires sessions itself. See reportLag.
func (d *zkDriver) lag() time.Duration { return d.heard.lag() }

// newDriver makes a driver; h is the record of what the leader heard, made
// before the connection when the driver dials it (nil: make one).
func newDriver(conn Conn, o Options, addr string, timeout func() time.Duration, h *heard) *zkDriver {
	ctx, cancel := context.WithCancel(context.Background())
	if h == nil {
		h = newHeard(timeout(), reportLag(o.TickTime, o.Deployment, timeout))
	}
	d := &zkDriver{
		conn:    conn,
		addr:    addr,
		root:    o.Root,
		acl:     o.ACL,
		timeout: timeout,
		heard:   h,
		ctx:     ctx,
		cancel:  cancel,

		sweepEvery: o.LockDelaySweep,
	}
	if d.sweepEvery == 0 {
		d.sweepEvery = DefaultLockDelaySweep // Open's Options come with no defaults
	}
	d.checking.Store(detects(o.TickTime, o.Deployment))
	clientOpened()
	return d
}

// goJanitor runs f in the background with a context that Close cancels. A
// janitor finishes what a caller had to give up on: deleting a node whose
// removal could not be confirmed. Without it such a node would block the
// key for as long as the session lives, which on a healthy connection is
// forever. It reports false, and does not run f, once Close has begun.
func (d *zkDriver) goJanitor(f func(ctx context.Context)) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.janitors.Add(1)
	go func() {
		defer d.janitors.Done()
		f(d.ctx)
	}()
	return true
}

// init creates the root and, when identities (ACL ids such as
// "digest:user:hash") are known, checks that they may create and read nodes
// under it, so that wrong credentials fail at Open rather than at the first
// Lock. Last, so that its proof is as fresh as can be, it makes the first
// standalone check (see Detect).
func (d *zkDriver) init(ctx context.Context, identities []string) error {
	// A connection broken for a moment (an ensemble electing a leader, a
	// server going away just after the dial) is retried here as in every
	// lock call, for up to one session timeout; ensurePath may be run again
	// after a lost answer, as a lost create comes back as NodeExists.
	deadline := time.Now().Add(d.timeout())
	for i := 0; ; i++ {
		err := d.ensurePath(ctx, d.root)
		if err == nil {
			break
		}
		if !transient(err) || time.Now().After(deadline) || backoff(ctx, i, d.timeout()/10) != nil {
			return d.wrapErr("create root "+d.root, err)
		}
	}
	if identities != nil {
		if err := d.checkRootACL(ctx, identities); err != nil {
			return err
		}
	}
	if err := d.detect(ctx); err != nil {
		return err
	}
	d.startSweep()
	return nil
}

// checkRootACL checks that identities may create and read nodes under the
// root.
func (d *zkDriver) checkRootACL(ctx context.Context, identities []string) error {
	acl, err := call(ctx, nil, d.timeout(), func() ([]zk.ACL, error) {
		acl, _, err := d.conn.GetACL(d.root)
		return acl, err
	})
	if err != nil {
		return d.wrapErr("read the ACL of "+d.root, err)
	}
	perms, unknown := effectivePerms(acl, identities)
	const need = zk.PermRead | zk.PermCreate
	if !unknown && perms&need != need {
		return fmt.Errorf("%w: zookeeper at %s: %s does not let %s create and read nodes (its ACL: %s); check the user and password in the URL",
			driver.ErrAuth, d.addr, d.root, describeIdentities(identities), describeACL(acl))
	}
	return nil
}

// effectivePerms sums the permissions that acl grants to anyone or to one of
// identities. unknown is true when acl has entries whose match this client
// cannot judge (ip, sasl, x509): then only the server can tell.
func effectivePerms(acl []zk.ACL, identities []string) (perms int32, unknown bool) {
	for _, a := range acl {
		switch a.Scheme {
		case "world":
			if a.ID == "anyone" {
				perms |= a.Perms
			}
		case "digest":
			// Without the admin permission the server shows digests as
			// "x:x": such an entry is not one of ours (ours carry admin).
			for _, id := range identities {
				if id == "digest:"+a.ID {
					perms |= a.Perms
				}
			}
		default:
			unknown = true
		}
	}
	return perms, unknown
}

func describeIdentities(ids []string) string {
	if len(ids) == 0 {
		return "an unauthenticated client"
	}
	users := make([]string, len(ids))
	for i, id := range ids {
		parts := strings.SplitN(id, ":", 3)
		users[i] = "user " + parts[min(1, len(parts)-1)]
	}
	return strings.Join(users, ", ")
}

func describeACL(acl []zk.ACL) string {
	parts := make([]string, len(acl))
	for i, a := range acl {
		id := a.ID
		if a.Scheme == "digest" {
			id, _, _ = strings.Cut(id, ":") // the user, not the hash
		}
		parts[i] = fmt.Sprintf("%s:%s=%s", a.Scheme, id, permString(a.Perms))
	}
	return strings.Join(parts, ", ")
}

func permString(p int32) string {
	var b strings.Builder
	for _, f := range []struct {
		bit int32
		c   byte
	}{{zk.PermCreate, 'c'}, {zk.PermDelete, 'd'}, {zk.PermRead, 'r'}, {zk.PermWrite, 'w'}, {zk.PermAdmin, 'a'}} {
		if p&f.bit != 0 {
			b.WriteByte(f.c)
		}
	}
	return b.String()
}

// ensurePath creates the persistent node path and its parents where they are
// missing. It checks before creating, because ZooKeeper checks the parent's
// create permission before noticing that a node exists.
func (d *zkDriver) ensurePath(ctx context.Context, path string) error {
	ok, err := call(ctx, nil, d.timeout(), func() (bool, error) {
		ok, _, err := d.conn.Exists(path)
		return ok, err
	})
	if err != nil || ok {
		return err
	}
	if parent := path[:strings.LastIndex(path, "/")]; parent != "" {
		if err := d.ensurePath(ctx, parent); err != nil {
			return err
		}
	}
	_, err = call(ctx, nil, d.timeout(), func() (string, error) {
		return d.conn.Create(path, nil, zk.FlagPersistent, d.acl)
	})
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// keyPath is the node of a key.
func (d *zkDriver) keyPath(key string) string { return d.root + "/" + escapeKey(key) }

// Close stops the janitors and closes the connection if the driver opened
// it: that ends the session, and the server deletes every node left of it.
// On a connection given to New, janitors get one session timeout to finish.
func (d *zkDriver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	if d.stopSweep != nil {
		d.stopSweep() // it would keep Close waiting for the janitors
	}
	d.mu.Unlock()

	done := make(chan struct{})
	go func() { d.janitors.Wait(); close(done) }()
	if d.closeConn == nil {
		t := time.NewTimer(d.timeout())
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	d.cancel()
	<-done
	if d.closeConn != nil {
		d.closeConn()
	}
	clientClosed()
	return nil
}

var (
	_ driver.Driver    = (*zkDriver)(nil)
	_ driver.Inspector = (*zkDriver)(nil)
)
