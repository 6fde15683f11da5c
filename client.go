package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/keys"
	"github.com/dlockdev/dlock/internal/lease"
)

// Client takes locks on one lock service. It is safe for concurrent use by
// many goroutines; create one per process and share it. Leases taken through
// a Client are renewed by it until they are unlocked or the Client is closed.
type Client struct {
	drv      driver.Driver
	defaults lockConfig
	log      *slog.Logger
	hooks    hookSet
	backend  string // driver.Named's, for the hooks
	// sched renews the leases together when the driver can
	// (driver.BatchRenewer); nil: each lease renews on its own.
	sched *lease.Scheduler

	// ctx is cancelled by Close, with the cause ErrClosed, so that
	// waiting Lock calls return.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// metadata is the default metadata encoded once, for the requests
	// that use it (the drivers do not modify it).
	metadata []byte

	// acquiring counts Lock and TryLock calls in flight: Close waits for
	// them, so that a cancelled attempt can still clean up on the server
	// before the connection closes.
	acquiring sync.WaitGroup

	mu     sync.Mutex
	leases map[*Lease]struct{} // held leases, released by Close; guarded by mu
	// calls holds the cancel functions of the Lock and TryLock calls in
	// flight with a ctx of their own, for Close; guarded by mu.
	calls    map[uint64]context.CancelCauseFunc
	lastCall uint64 // the key of the latest in calls; guarded by mu
	closed   bool   // guarded by mu
	// closing bounds every release that Close causes, including that of a
	// grant that arrives while Close runs; set with closed. Guarded by mu.
	closing context.Context
}

// NewClient wraps a driver in a Client. Backend packages call it from their
// New and Open functions; applications normally call those, or Open. It
// returns an error satisfying errors.Is(err, ErrInvalidOption) for a bad
// option, including a WithTTL that the driver cannot honour (see
// driver.FixedTTL).
func NewClient(d driver.Driver, opts ...Option) (*Client, error) {
	host, _ := os.Hostname()
	discard := slog.New(slog.DiscardHandler)
	cfg := clientConfig{
		lock:   lockConfig{ttl: DefaultTTL, metadata: Metadata{Host: host, PID: os.Getpid()}},
		logger: discard,
	}
	for _, o := range opts {
		if err := o.applyClient(&cfg); err != nil {
			return nil, err
		}
	}
	if err := checkFixedTTL(d, &cfg.lock); err != nil {
		return nil, err
	}
	if err := checkLockDelay(d, &cfg.lock); err != nil {
		return nil, err
	}
	if lg, ok := d.(driver.Logging); ok {
		lg.SetLogger(cfg.logger)
	}
	hooks := cfg.hooks
	if cfg.logger != discard {
		// Last, so that its records carry what the other hooks put in
		// the context (a tracer's span, for a handler that reads it).
		hooks = append(hooks[:len(hooks):len(hooks)], logHooks(cfg.logger))
	}
	backend := ""
	if n, ok := d.(driver.Named); ok {
		backend = n.Backend()
	}
	var sched *lease.Scheduler
	if br, ok := d.(driver.BatchRenewer); ok {
		sched = lease.NewScheduler(br)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Client{
		sched:    sched,
		metadata: encodeMetadata(cfg.lock.metadata, ""),
		calls:    make(map[uint64]context.CancelCauseFunc),
		drv:      d,
		defaults: cfg.lock,
		log:      cfg.logger,
		hooks:    combineHooks(hooks),
		backend:  backend,
		ctx:      ctx,
		cancel:   cancel,
		leases:   make(map[*Lease]struct{}),
	}, nil
}

// Lock takes key, waiting until it is free and every earlier waiter has been
// served (waiters are served in arrival order), or until ctx ends.
//
// Locks are not reentrant, as sync.Mutex is not: a Lock of a key that the
// caller already holds waits for the caller's own Unlock, that is until ctx
// ends, except where the Client can tell (see ErrReentrant).
//
// It returns an error satisfying errors.Is with ErrInvalidKey or
// ErrInvalidOption for bad arguments (including a WithTTL that the backend
// cannot honour, see WithTTL), ErrReentrant when ctx comes from a Do of the
// same key on this Client, ErrClosed after Close, ErrUnavailable
// when the server cannot be reached, or ctx.Err() wrapped. When it returns an
// error it leaves nothing behind on the server.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lease, error) {
	return c.acquire(ctx, "lock", key, lockShape, true, opts)
}

// TryLock takes key if it is free and nobody waits for it, and otherwise
// returns at once with an error satisfying errors.Is(err, ErrLocked). It
// returns the same other errors as Lock.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lease, error) {
	return c.acquire(ctx, "lock", key, lockShape, false, opts)
}

// shape is what one acquire asks for: the key's kind and limit, and the
// mode of the caller's entry in its queue (see package driver, Kind).
type shape struct {
	kind  Kind
	limit int
	mode  Mode
}

var lockShape = shape{KindLock, 1, Exclusive}

// acquire serves every primitive: op names the call in errors ("lock",
// "acquire", "rlock"). It tells the hooks of its start and of its end,
// whatever the outcome (see Hooks).
func (c *Client) acquire(ctx context.Context, op, key string, sh shape, wait bool, opts []LockOption) (*Lease, error) {
	var began time.Time
	hooked := c.hooks.acquires()
	if hooked {
		began = time.Now()
		ctx = c.hooks.startAcquire(ctx, AcquireStartInfo{Backend: c.backend, Key: key, Kind: sh.kind, Mode: sh.mode, Limit: sh.limit, Wait: wait && !hasNoWait(opts)})
	}
	l, granted, err := c.take(ctx, op, key, sh, wait, opts, began)
	if err != nil && hooked && !granted {
		c.hooks.doneAcquire(ctx, AcquireDoneInfo{Backend: c.backend, Key: key, Kind: sh.kind, Mode: sh.mode, Limit: sh.limit, Outcome: outcome(err), Waited: time.Since(began), Err: err})
	}
	return l, err
}

// take is acquire but for the hooks' start and failure: it tells them of
// a grant itself, before the lease's engine can report the lease's end,
// and reports granted, even when it fails after the grant (see below).
// began is when acquire began, when it has hooks to tell.
func (c *Client) take(ctx context.Context, op, key string, sh shape, wait bool, opts []LockOption, began time.Time) (l *Lease, granted bool, err error) {
	if err := keys.Validate(key); err != nil {
		return nil, false, opErr(op, key, err)
	}
	if sh.kind == KindSemaphore && sh.limit < 1 {
		return nil, false, opErr(op, key, fmt.Errorf("%w: semaphore limit %d is below 1", ErrInvalidOption, sh.limit))
	}
	cfg := c.defaults
	if len(opts) > 0 {
		var err error
		if cfg, err = withLockOptions(cfg, opts); err != nil {
			return nil, false, opErr(op, key, err)
		}
	}
	if err := checkFixedTTL(c.drv, &cfg); err != nil {
		return nil, false, opErr(op, key, err)
	}
	if err := cfg.checkHolds(); err != nil {
		return nil, false, opErr(op, key, err)
	}
	if err := checkLockDelay(c.drv, &cfg); err != nil {
		return nil, false, opErr(op, key, err)
	}
	wait = wait && !cfg.noWait
	if c.holdsInContext(ctx, key) {
		// Inside Do of this key: waiting would wait for ourselves.
		return nil, false, opErr(op, key, ErrReentrant)
	}
	// The request, and the call's context when it needs one, live in the
	// lease they become: one allocation for all.
	l = &Lease{client: c, key: key, kind: sh.kind, mode: sh.mode, metadata: cfg.metadata}
	// The hooks' context outlives the call, kept with the lease.
	hookCtx := ctx
	// Close must interrupt a waiting Lock.
	ctx, call, err := c.startCall(ctx, &l.callCtx)
	if err != nil {
		return nil, false, opErr(op, key, err)
	}
	defer c.endCall(call)

	l.req = driver.AcquireRequest{
		Key:       key,
		Owner:     newOwnerID(&l.ownerBits),
		TTL:       cfg.ttl,
		Metadata:  c.metadata,
		Wait:      wait,
		Kind:      sh.kind,
		Limit:     sh.limit,
		Mode:      sh.mode,
		LockDelay: cfg.lockDelay,
	}
	if cfg.metadata != c.defaults.metadata || cfg.value != "" {
		l.req.Metadata = encodeMetadata(cfg.metadata, cfg.value)
	}
	req := &l.req
	g, err := c.drv.Acquire(ctx, req)
	if err != nil {
		if c.ctx.Err() != nil {
			return nil, false, opErr(op, key, fmt.Errorf("%w: %w", ErrClosed, err))
		}
		return nil, false, opErr(op, key, err)
	}
	at := time.Now()
	l.token, l.ttl, l.grant, l.granted = g.Token(), g.Validity(), g, at
	// A grant is told as acquired even when Close turns out below to
	// have begun meanwhile: its lease then ends at once, as closed, and
	// every lease end the hooks hear of follows its grant.
	if c.hooks.acquires() {
		hookCtx = c.hooks.doneAcquire(hookCtx, AcquireDoneInfo{Backend: c.backend, Key: key, Kind: sh.kind, Mode: sh.mode, Limit: sh.limit, Outcome: OutcomeAcquired, Waited: at.Sub(began), Token: l.token})
	}
	var obs lease.Observer
	if c.hooks.watchesLeases() {
		l.hookCtx, obs = hookCtx, leaseEvents{l}
	}
	l.eng = &l.engine
	lease.StartIn(l.eng, c.sched, key, g, c.log, obs)
	if cfg.hold > 0 {
		l.hold = &minHold{until: at.Add(cfg.hold)}
	}
	if cfg.holdMax > 0 {
		l.eng.LimitAt(at.Add(cfg.holdMax), fmt.Errorf("%w: released %v after it was granted (HoldAtMost)", ErrHoldLimit, cfg.holdMax))
	}

	c.mu.Lock()
	closed, closing := c.closed, c.closing
	if !closed {
		c.leases[l] = struct{}{}
	}
	c.mu.Unlock()
	if closed {
		// Close ran while we were acquiring: do not leak the grant, but
		// do not hold Close up for longer than its own releases either
		// (Close waits for this call).
		_ = l.closeWithin(closing)
		return nil, true, opErr(op, key, ErrClosed)
	}
	return l, true, nil
}

// closeWithin releases l for Close, waiting at most its TTL within ctx:
// after a TTL the server frees the key by itself, since nobody renews it
// any more. Its Err then satisfies errors.Is(err, ErrClosed).
func (l *Lease) closeWithin(ctx context.Context) error {
	defer l.client.forget(l)
	ctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	return l.eng.ReleaseWith(ctx, fmt.Errorf("lease %s: %w: released by Close", keys.Quote(l.key), ErrClosed))
}

// checkFixedTTL refuses a TTL given with WithTTL that a driver.FixedTTL
// cannot honour, and otherwise sets cfg's TTL to the fixed one. Silently
// granting another length than asked would let a caller plan its work on
// a lease that ends sooner (or later) than it thinks.
func checkFixedTTL(d driver.Driver, cfg *lockConfig) error {
	f, ok := d.(driver.FixedTTL)
	if !ok {
		return nil
	}
	fixed, hint := f.FixedTTL()
	if cfg.ttlSet && cfg.ttl != fixed {
		return fmt.Errorf("%w: TTL %v cannot be honoured: %s", ErrInvalidOption, cfg.ttl, hint)
	}
	cfg.ttl = fixed
	return nil
}

func (c *Client) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leases, l)
}

// Inspect returns who holds key and who waits for it, in order. It returns
// an error satisfying errors.Is with ErrInvalidKey for a bad key,
// errors.ErrUnsupported when the backend cannot inspect, ErrClosed after
// Close, ErrUnavailable when the server cannot be reached, or ctx.Err()
// wrapped.
func (c *Client) Inspect(ctx context.Context, key string) (*LockInfo, error) {
	if err := keys.Validate(key); err != nil {
		return nil, opErr("inspect", key, err)
	}
	in, err := c.inspector()
	if err != nil {
		return nil, opErr("inspect", key, err)
	}
	info, err := in.Inspect(ctx, key)
	if err != nil {
		return nil, opErr("inspect", key, err)
	}
	return convertInfo(info), nil
}

// List returns the keys starting with prefix that are held or waited for,
// sorted by key. An empty prefix lists every key. It returns the same errors
// as Inspect (ErrInvalidKey for a prefix that is not UTF-8, has control
// characters or is longer than MaxKeyLen bytes).
func (c *Client) List(ctx context.Context, prefix string) ([]*LockInfo, error) {
	if err := keys.ValidatePrefix(prefix); err != nil {
		return nil, opErr("list", prefix, err)
	}
	in, err := c.inspector()
	if err != nil {
		return nil, opErr("list", prefix, err)
	}
	infos, err := in.List(ctx, prefix)
	if err != nil {
		return nil, opErr("list", prefix, err)
	}
	out := make([]*LockInfo, len(infos))
	for i, info := range infos {
		out[i] = convertInfo(info)
	}
	return out, nil
}

func (c *Client) inspector() (driver.Inspector, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	in, ok := c.drv.(driver.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: the backend cannot inspect locks", errors.ErrUnsupported)
	}
	return in, nil
}

func convertInfo(in *driver.LockInfo) *LockInfo {
	out := &LockInfo{Key: in.Key, Kind: in.Kind, Limit: in.Limit, DelayedUntil: in.DelayedUntil}
	for _, h := range in.Holders {
		out.Holders = append(out.Holders, convertEntry(h))
	}
	for _, w := range in.Waiters {
		out.Waiters = append(out.Waiters, convertEntry(w))
	}
	return out
}

func convertEntry(e driver.Entry) Entry {
	md, value := decodeMetadata(e.Metadata)
	return Entry{Token: e.Token, Metadata: md, Since: e.Since, TTL: e.TTL, Mode: e.Mode, Value: value, LockDelay: e.LockDelay}
}

// Close releases every lease still held through c (their Err then satisfies
// errors.Is(err, ErrClosed)), makes waiting Lock calls return ErrClosed, and
// closes the connection if the Client opened it. A Client built by a
// backend's New from an existing connection leaves that connection open.
//
// Close releases the leases all at once and waits for the server's answer
// to each for at most the lease's TTL, and for all of them at most
// CloseTimeout: a lease whose release is not confirmed by then is freed by
// the server when its TTL runs out, since nobody renews it any more. Close
// returns the errors of the releases that the server did not confirm.
//
// A lease still within its minimum hold (HoldAtLeast) is not released but
// left to expire: Close stops renewing it and the server frees the key when
// its TTL runs out, as if the process had died. (On ZooKeeper, the key is
// freed by Close: see HoldAtLeast.)
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	held := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		held = append(held, l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	c.closed, c.closing = true, ctx
	// The Client's first: a call that ends finds it ended, and says
	// ErrClosed.
	c.cancel(ErrClosed)
	for _, cancel := range c.calls {
		cancel(ErrClosed)
	}
	c.mu.Unlock()

	// In parallel: on a server that does not answer, one after another
	// would take a TTL per lease.
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, l := range held {
		if l.takeInHold() {
			// Left to the server's TTL: see HoldAtLeast.
			wg.Go(func() {
				if err := l.abandonWithin(ctx); err != nil {
					errs[i] = opErr("close: abandon", l.key, err)
				}
			})
			continue
		}
		wg.Go(func() {
			if err := l.closeWithin(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
				errs[i] = opErr("close: unlock", l.key, err)
			}
		})
	}
	wg.Wait()
	c.acquiring.Wait()
	if err := c.drv.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// withLockOptions returns cfg with opts applied. It is apart from take
// so that only a call with options pays for the copy they modify.
func withLockOptions(cfg lockConfig, opts []LockOption) (lockConfig, error) {
	for _, o := range opts {
		if err := o.applyLock(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// newOwnerID returns 128 random bits: an identity nobody can guess or
// collide with, unlike a host name, a thread id or a timestamp.
// The bits are read into b, which the caller keeps in a struct it has
// allocated anyway: a local array would escape to the heap (into
// crypto/rand, in some builds) on every call.
func newOwnerID(b *[16]byte) string {
	_, _ = rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	return hex.EncodeToString(b[:])
}

// startCall counts a Lock or TryLock call in flight for Close, and
// returns its ctx ended by Close too (with the cause ErrClosed), and the
// key of its cancel function for endCall. It returns ErrClosed after
// Close. A ctx that carries values but is never cancelled is kept in
// own, which the caller has allocated anyway.
func (c *Client) startCall(ctx context.Context, own *closedBy) (context.Context, uint64, error) {
	var cancel context.CancelCauseFunc
	if ctx.Done() == nil {
		// Never cancelled (Background, or values only): Close alone ends
		// it, with no context of its own to register.
		if ctx != context.Background() {
			*own = closedBy{c.ctx, ctx}
			ctx = own
		} else {
			ctx = c.ctx
		}
	} else {
		ctx, cancel = context.WithCancelCause(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		if cancel != nil {
			cancel(nil)
		}
		return nil, 0, ErrClosed
	}
	c.acquiring.Add(1)
	if cancel == nil {
		return ctx, 0, nil
	}
	c.lastCall++
	c.calls[c.lastCall] = cancel
	return ctx, c.lastCall, nil
}

// endCall ends what startCall began.
func (c *Client) endCall(call uint64) {
	if call != 0 {
		c.mu.Lock()
		cancel := c.calls[call]
		delete(c.calls, call)
		c.mu.Unlock()
		cancel(nil)
	}
	c.acquiring.Done()
}

// closedBy is a context that ends when the Client's does, with the values
// of a context that never ends.
type closedBy struct {
	context.Context // the Client's
	values          context.Context
}

func (c *closedBy) Value(key any) any {
	// The Client's context answers for its cancellation (context.Cause),
	// and has no other values.
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}

// mergeCancel returns a context that ends when ctx or other ends.
func mergeCancel(ctx, other context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(other, func() { cancel(ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

// opErr puts the call and its key (or prefix) before err, as the one place
// that names them: see the rule for messages in package driver.
func opErr(op, key string, err error) error {
	return fmt.Errorf("%s %s: %w", op, keys.Quote(key), err)
}
