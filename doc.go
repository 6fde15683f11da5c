// Package dlock is a distributed lock: processes on many hosts take a named
// lock so that only one of them does a piece of work at a time, such as the
// scheduled "close expired orders" job that runs on every instance of a
// service.
//
// # Overview
//
// Open a Client once per process with a backend URL, then take locks:
//
//	client, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0")
//	...
//	lease, err := client.Lock(ctx, "orders/close-expired")
//	...
//	defer lease.Unlock(ctx)
//
// Lock waits, in arrival order, until the key is free; TryLock gives up at
// once with ErrLocked. A Lease renews itself in the background (about every
// TTL/3, see WithTTL) until Unlock; where the backend can, a Client renews all
// its leases of one TTL in one request per renewal interval, each lease still
// lost alone if its renewal fails. If the holder crashes, the server frees the
// key after at most one TTL. Client.Do runs a function under a lock with a
// context that is cancelled when the lease is lost.
//
// Locks are not reentrant, as sync.Mutex is not: a caller that locks a key it
// already holds waits for itself. Where the Client can tell (a Lock or Do
// nested in a Do of the same key), it returns ErrReentrant instead.
//
// # Primitives
//
// Besides the lock, a key can serve as a semaphore ("at most 3 exports at
// once across the fleet") or a read-write lock ("many readers of the price
// table, one writer at a time"):
//
//	permit, err := client.Semaphore("exports", 3).Acquire(ctx)
//	...
//	read, err := client.RWMutex("prices").RLock(ctx)
//
// Both, and the lock, are one fair queue per key whose entries carry a Mode,
// Exclusive (a lock, a writer) or Shared (a reader, a permit), under one
// grant rule: an entry is granted when every entry ahead of it is
// compatible with it (Shared with Shared) and fewer than the limit (a
// semaphore's permits; 1 for a lock; none for readers) are ahead of it. So
// grants follow arrival order, a reader that arrives behind a waiting
// writer waits behind it (writers never starve), and a release grants, and
// wakes, exactly the waiters it makes grantable. Every grant is a Lease
// with the same guarantees (renewal, Done, fencing token). A key serves one
// kind, with one limit, while anybody holds or waits for it: a call of
// another kind fails with ErrKindMismatch.
//
// The same queue serves leader election (Client.Election: Campaign,
// Leadership with Proclaim and Resign, Leader, Observe, and Lead to run a
// function whenever the caller leads) and locks of several keys at once
// (Client.LockAll, TryLockAll: all keys or none, taken in one global order
// so that callers cannot deadlock). See docs/primitives.md.
//
// Client.Inspect reads who holds a key and who waits for it, in order;
// Client.Watch streams that state again after every change (a grant, a
// release, an expiry, a waiter joining or leaving), learnt from the
// server's notifications rather than by polling, as `dlock status --watch`
// shows it. On Redis the notices are partial (see package redisdlock).
//
// # Revoke and lock-delay
//
// Client.Revoke is an operator's way to remove a holder stuck in a live
// process that renews its lease for ever: it ends the grants of a key on
// the server, every holder's or, with RevokeToken, one holder's (`dlock
// revoke KEY [--holder TOKEN]`). Waiters keep their places and are granted
// as after an Unlock. The revoked Lease learns of it at its next contact
// with the server: its Done closes, its Err satisfies ErrLeaseLost, its
// Unlock returns ErrNotHeld.
//
// WithLockDelay (per Client, or per Lock, Semaphore, RWMutex or Election
// call) gives a lease a lock-delay, as Consul's: after its grant ends other
// than by Unlock (it expired on the server, its session ended, it was
// revoked), nobody else is granted the key until the delay has passed, so
// that a holder that lost its lease without knowing it has time to notice
// first. Meanwhile the ended lease keeps its place as a holder (a
// semaphore's permit or a reader's share stays taken). An Unlock never
// starts a delay. Client.Inspect shows each holder's Entry.LockDelay and,
// while a delay keeps the key from everyone, LockInfo.DelayedUntil.
//
// The delay counts by the server's clock from the grant's end where the
// server keeps time (Redis: the holder's deadline on the server, or the
// revoke's; memdlock: its space's clock), and on ZooKeeper and etcd from the
// moment the client of the next grant learned that the lease was gone,
// which is never earlier than its end. A backend that cannot revoke (its
// driver does not implement driver.Revoker) fails Revoke, and a lock with a
// lock-delay, with errors.ErrUnsupported. A backend's common path pays
// nothing for the feature while no lease carries a delay.
//
// # Safety
//
// It is NOT safe to assume that holding a Lease means nobody else holds the
// key. No lease-based lock can promise that: a process paused for longer than
// its TTL (a long garbage-collection pause, a frozen VM, SIGSTOP) or cut off
// from the server wakes up still holding a Lease that the server has already
// given to someone else. What dlock does guarantee:
//
//   - The server never grants a key to two owners whose leases are both
//     unexpired, except as the key's kind allows: up to its limit of
//     permits on a semaphore, readers together on a read-write lock, and
//     never a writer beside any other lease.
//   - Lease.Done is closed, and Lease.Err says why, no later than the moment
//     the server could grant the key to somebody else. The local deadline is
//     counted from when the acquire or renew request was sent, less a margin
//     for clock drift, and never from a client's wall clock.
//   - Lease.Token is a fencing token that only goes up for a key: every
//     grant's is above every earlier grant's, readers and permits
//     included. Pass it to the database or service you write to, and have
//     that reject a token lower than the highest it has seen: that is what
//     makes a stale holder harmless. The guards do it in the store, in the
//     write's own atomic step, and refuse with ErrStaleToken: package
//     sqlfence (PostgreSQL, SQLite, MySQL/MariaDB), redisdlock.NewFence, etcddlock.IsOwner
//     and its token fence, zkdlock.CheckHeld, package httpfence
//     (docs/fencing.md). Shared leases overlap by design, so a resource
//     fenced by a semaphore or a read-write lock must not reject a token
//     merely for being below another holder's: fence per item instead
//     (docs/fencing.md, "Shared modes").
//   - Unlock and renewal only ever act on the caller's own grant, identified
//     by a random 128-bit owner id, even when replies are lost and retried.
//
// On a ZooKeeper ensemble the deadline counts from an earlier moment: only
// the leader expires sessions, and it hears of a follower's clients only
// with the follower's next ping reply, so a renewal counts from the renewal
// before it (and a grant from activity the leader is known to have heard
// of). The guarantee above holds there as long as ZooKeeper's servers answer
// their pings within half a tick (plus an eighth), with the tick the
// zk:// URL's tick_time or, without it, at most half the session timeout;
// the lease then survives one missed renewal instead of two. zkdlock tells
// a standalone server (where a renewal counts from itself) from an ensemble
// by reading /zookeeper/config, at every proof; standalone=true stated for an
// ensemble breaks the guarantee. See docs/zookeeper.md.
//
// A revoke (Client.Revoke) does NOT stop the revoked holder's process: it
// ends the grant on the server, and the holder learns of it only at its
// next contact with the server, perhaps after the next holder has started.
// What protects the work is the fencing token (the next grant's is above
// the revoked one) and a lock-delay (WithLockDelay) long enough for the
// revoked holder to notice; a lock-delay protects the same way after an
// expiry.
//
// Check Done before each step of the protected work, and use the fencing
// token wherever a late write would do harm.
//
// The exceptions, by backend. On Redis (redisdlock; docs/redis.md):
//
//   - A failover can lose a lock: Redis replicates asynchronously, so a new
//     master may not know a grant its predecessor acknowledged, and grants
//     the key again. A restart without persistence does the same. Tokens
//     still go up as long as the server's clock is not behind the last one
//     (docs/reliability.md).
//   - Redis expires keys by its wall clock. If that clock steps ahead, held
//     keys expire early, and another client can be granted one while its
//     holder's lease is still valid locally: the second guarantee above
//     fails. The holder finds out at its next renewal (about TTL/3 later, at
//     most one TTL), whose ErrLeaseLost says how far the server's clock ran
//     ahead; until then two clients hold the key, and only the fencing token
//     (the later grant's is higher) orders them. If the clock steps back,
//     leases last longer on the server, and tokens still only go up while
//     the server keeps its data.
//   - A maxmemory-policy other than noeviction lets Redis evict a held key
//     and grant it twice. redisdlock refuses such a server
//     (redisdlock.ErrUnsafeServer) unless told to accept it; a server that
//     will not report its policy is accepted, and must be configured with
//     noeviction. An allkeys-* policy may also evict the record that keeps
//     the tokens of a hash slot's free keys: their next tokens then go up
//     only as after a restart.
//   - A release resent after a lost reply may report a false ErrNotHeld
//     when the slot-wide traces it reads changed before it arrived; never a
//     false success. Clients of versions that kept a fence per key, beside
//     newer ones, keep tokens increasing only as after a restart for the
//     grants they make (docs/redis.md, "Keys").
//   - redisdlock.Fence keeps a fence's highest token in one key without
//     expiry: an allkeys-* maxmemory-policy may evict it (Fence refuses such
//     a server when it creates the key, unless AllowFenceEviction), and a
//     failover to a replica that missed the latest fenced writes loses
//     their token with them, so a stale holder's next write lands until the
//     newer holder writes again (docs/fencing.md).
//   - redisdlock.Fence runs a write that go-redis resends after its reply
//     was lost only once (ErrReplyLost) by remembering the ids of the last
//     8 writes of the fence; a resend that comes after 8 other writes of
//     the fence is judged anew, and a non-idempotent write (INCRBY) then
//     runs twice (docs/fencing.md, section Redis, "A lost reply").
//
// On ZooKeeper (zkdlock; docs/zookeeper.md):
//
//   - A lease lives as long as the Client's session: one expired session (a
//     pause or a network cut longer than the session timeout) loses every
//     lease of that Client at once.
//   - A lease in its minimum hold (HoldAtLeast) ends with Client.Close
//     there, instead of lasting until its TTL as on the other backends:
//     Close ends the session of a Client of Open, and deletes the lease's
//     node on the caller's connection for a Client of zkdlock.New, whose
//     session would otherwise keep it for as long as it lives.
//   - On an ensemble, the rule above rests on ZooKeeper answering its own
//     pings in time; a server JVM stalled past half a tick while it still
//     follows, a tick_time smaller than the ensemble's, or standalone=true
//     on an ensemble can let the leader expire a session before Done closes.
//     A standalone server is detected by itself.
//   - Lock nodes are dlock's to write: a set or delete by hand on a waiter's
//     node can let the waiter behind it take the key beside the holder.
//
// On etcd (etcddlock; docs/etcd.md):
//
//   - Before etcd 3.4.31, 3.5.13 and 3.6.0, a leader that pauses (a stalled
//     disk, CPU starvation, a frozen VM) and resumes revokes leases that a
//     new leader renewed in the meantime, and the key goes to the next
//     waiter while its holder's lease is valid: the second guarantee above
//     fails. etcddlock refuses a cluster with such a member
//     (etcddlock.ErrUnsafeServer) unless told to accept it
//     (AllowUnsafeVersion); it checks the members at Open and New, so a
//     member added later is not checked until the next one.
//   - A waiter's entry deleted by hand (or its lease revoked by hand) just
//     before the release ahead of it lets that waiter take the key beside
//     the next holder; it finds out at its first renewal, and the tokens
//     still order the two.
//
// In each of these cases the later grant's fencing token is the higher one
// (after a Redis failover, as long as the new master's clock is not behind
// the old one's): a resource that checks tokens rejects the stale holder.
//
// # Errors
//
// Errors are values to test with errors.Is: ErrLocked, ErrNotHeld,
// ErrLeaseLost, ErrReleased, ErrHoldLimit, ErrClosed, ErrReentrant, ErrKindMismatch,
// ErrNoLeader, ErrInvalidKey, ErrInvalidOption, ErrInvalidURL, ErrUnavailable
// and ErrAuth; and, from the fenced writes, ErrStaleToken (a
// *StaleTokenError where the store knows the recorded token) and
// ErrInvalidFence. A call the backend cannot serve (Inspect, Revoke, a
// lock-delay) fails with errors.ErrUnsupported. Their messages name the key
// or address concerned.
//
// # Hooks
//
// WithHooks gives a Client functions to call at the events of its leases'
// lives, in the manner of net/http/httptrace: an acquire's start and end
// with its Outcome (acquired, skipped, timeout, canceled, error) and how
// long it waited, each renewal with its latency and how late it was sent,
// each lease's one end with its EndReason (released, expired, dropped,
// hold_limit, closed) and how long it was held, and a Do whose function
// ran on after its lease ended. The modules observability/dlockprom and
// observability/dlockotel turn them into Prometheus metrics and
// OpenTelemetry traces and metrics. A Client without hooks pays nothing for
// them, and hooks that do nothing add no allocation. See Hooks and
// docs/observability.md.
//
// # Logs
//
// dlock writes nothing to stderr, and keeps its backends' client libraries
// from doing so on its behalf. WithLogger names a log/slog logger that gets
// a record of every event the hooks see (at Debug, but for a failed
// renewal, a lost lease and a lease cut at its maximum hold at Warn, and a
// Do's function that ran on after its lease ended at Error), of what the
// Client recovers from by itself (a reconnect) and, where the client
// library has a logger per connection (go-zookeeper), that library's
// messages; without it they are dropped, and no record is even made.
// go-redis has one logger per process, which the program owns: see
// redisdlock.SetRedisLogger. docs/observability.md lists the records.
//
// # Backends
//
// Each backend is a package that registers its URL schemes with Open when
// imported, and offers New to build a Client from a connection the program
// already has:
//
//   - redisdlock: redis://[user:password@]host:port[/db],
//     rediss:// for TLS, redis+sentinel://, redis+cluster://.
//     See docs/redis.md.
//   - zkdlock: zk://[user:password@]host:port[,host:port…][/root][?session_timeout=10s&connect_timeout=5s&tick_time=2s|standalone=true|false].
//     The lease length is the ZooKeeper session timeout: WithTTL of any
//     other length is refused with ErrInvalidOption. zks:// for TLS
//     (cacert, cert, key, server_name). See docs/zookeeper.md.
//   - etcddlock: etcd://[user:password@]host[:port][,host[:port]…][/prefix][?dial_timeout=5s],
//     etcds:// for TLS (cacert, cert, key, server_name). See docs/etcd.md.
//   - memdlock: mem://NAME, a lock space in memory shared by the clients
//     of that NAME in one process: for tests, not between processes. See
//     docs/testing.md.
//
// Keys are UTF-8 strings of 1 to MaxKeyLen bytes without control characters;
// "/" has no special meaning.
package dlock
