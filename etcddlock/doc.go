// Package etcddlock is the etcd backend of dlock: a fair (FIFO) queue per
// key on etcd v3 that serves locks, semaphores, read-write locks and leader
// elections, in which each waiter watches only what can grant it (a lock
// waiter, the entry just ahead of it), with leases that etcd expires when
// their holder stops renewing them, and fencing tokens taken from etcd's
// revision counter. An election's leader publishes its value by rewriting
// its entry, and observers follow the queue with one etcd watch. docs/etcd.md
// describes the algorithm and what it guarantees.
//
// Import it to register the URL schemes used by dlock.Open:
//
//	etcd://[user:password@]host[:port][,host[:port]…][/prefix][?params]
//	etcds://…                                        (TLS)
//
// The port defaults to 2379. Several hosts name the members of one cluster.
// The path is the prefix of every etcd key dlock writes, with a trailing
// slash added (default "dlock/", see DefaultPrefix). A user name and
// password, percent-encoded in the URL, authenticate with etcd's own
// authentication. Parameters:
//
//	dial_timeout=5s     how long Open waits for etcd's first answer (default
//	                    DefaultDialTimeout, or less if Open's context ends
//	                    sooner)
//	cacert=FILE         etcds: PEM file of the CAs that sign the server's
//	                    certificate (default: the system's roots)
//	cert=FILE, key=FILE etcds: client certificate and key, for servers that
//	                    require one (--client-cert-auth)
//	server_name=NAME    etcds: the name to verify in the server's
//	                    certificate (default: the host in the URL)
//	allow_unsafe_version=true
//	                    accept etcd versions that revoke live leases (see
//	                    Options.AllowUnsafeVersion; default false)
//	lease_per_grant=true
//	                    an etcd lease per call instead of one shared by the
//	                    Client (see Options.LeasePerGrant; default false)
//
// Or build a Client from an etcd client the program already has with New.
//
// # etcd versions
//
// Open and New ask every member of the cluster for its version and refuse
// (ErrUnsafeServer) one before 3.4.31, 3.5.13 or 3.6.0 on its release line:
// a leader of those versions that pauses and resumes revokes leases that a
// new leader renewed, and so grants a held lock to a second owner. A member
// added to the cluster later is checked by the next Open or New, not by
// running Clients. docs/etcd.md, "etcd versions", says what is checked and
// how.
//
// # TTL
//
// etcd counts lease TTLs in whole seconds: a lock's TTL is rounded up to
// the next second, and raised to the server's minimum, which is 1.5 election
// timeouts rounded up (2 s with etcd's default election timeout of 1 s). The
// lease then lasts as long as etcd granted, and is renewed every third of
// it. A TTL of 100 ms therefore behaves as one of 1 or 2 s.
//
// # Safety: one lease per Client and TTL
//
// A Client's held locks and places in queues of one TTL share one etcd
// lease, renewed by one keep-alive per third of the TTL for all of them.
// An entry deleted behind a holder's back ends that lock alone. **The
// shared lease lapsing — the process paused or cut off past the TTL, an
// operator's revoke — ends every lock and place of that Client and TTL at
// once**, as a ZooKeeper session's end does: each Lease's Done closes
// before etcd can expire the lease and grant the key elsewhere, Unlock
// returns dlock.ErrNotHeld, and waiters queue again. A Client whose
// requests to free an entry get no answer within a few seconds gives the
// lease up, with the same effect. Locks whose fates must stay apart belong
// to different Clients (or TTLs). docs/etcd.md, "One lease per Client and
// TTL", gives the argument.
//
// # Network blips
//
// A keep-alive left unanswered — a frozen leader behind the follower that
// forwards it, a connection gone silent — is sent again with half of
// the time left before the lease's deadline, alternately on the client's
// connection and on a fresh one, so a lease survives a leader change or a
// dead connection when the cluster answers again in time; it counts only
// from a keep-alive that was answered. Open's client reconnects at most
// ReconnectMaxDelay apart and abandons a connection attempt that gets no
// answer after ReconnectAttemptTimeout, so a Client works again within a
// few seconds of the network's return; give a client passed to New the
// same with DialOptions. docs/etcd.md, "When the network blips".
//
// # Fencing
//
// For data kept in etcd, the fencing check can be etcd's own, in the Txn
// that writes: IsOwner returns a comparison that holds while a lease holds
// its key, and OwnerTxn runs operations under it; FencedTxn (or FenceOp and
// FenceResult in a Txn of your own) records the highest fencing token at a
// fence key and refuses lower ones, for leases of any backend. A refused
// write returns a *dlock.StaleTokenError and writes nothing.
// docs/fencing.md, section etcd says what each guarantees, and what not.
//
// # Inspect and List
//
// They report the key's kind and limit, the holders in grant order (each
// with its mode, fencing token and TTL left, rounded up to whole seconds)
// and the waiters in order (with their modes), and every entry's metadata. Since is always zero: etcd
// stores no time with a key, and a client's clock is not the server's.
//
// # Revoke and lock-delay
//
// Client.Revoke deletes the holders' entries, never the Client's shared
// etcd lease, so a revoked holder's other locks live on. An entry with a
// lock-delay (dlock.WithLockDelay) keeps a record beside it, on a lease
// of its own kept alive after the entry's, with a TTL longer by the delay:
// after an expiry or a revoke, waiters count it as a holder until the
// delay has passed on their own clock, and etcd deletes it about the
// delay after the entry went. docs/etcd.md, Revoke and lock-delay.
//
// # Logs
//
// The etcd client made by Open logs nothing (zap.NewNop); one given to New
// logs where its Config.Logger says. dlock's own messages go to the
// Client's dlock.WithLogger logger.
package etcddlock
