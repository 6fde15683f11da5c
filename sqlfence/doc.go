// Package sqlfence rejects the writes of a lock holder whose lease was lost,
// inside the database the lock protects: it records the lease's fencing
// token in a fence row of the caller's own transaction, and refuses the
// transaction when a newer holder has already recorded a higher token.
//
// A lease alone cannot keep a paused holder from writing: a process frozen
// past its TTL (a garbage-collection pause, a VM migration, SIGSTOP) wakes up
// believing it holds the lock while the server has granted it to somebody
// else. Its writes go through unless the database itself checks. Check is
// that check, done right: one statement that records the token and holds the
// fence row until the transaction ends, so that a newer holder's transaction
// orders after this one, and this one fails if a newer holder got there
// first.
//
//	fences := sqlfence.New(sqlfence.Postgres)
//	err := fences.Do(ctx, db, "close-orders", lease.Token(), func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'closed' WHERE due < now()")
//		return err
//	})
//	if errors.Is(err, dlock.ErrStaleToken) {
//		// a newer holder has written: this one lost its lease; nothing was written
//	}
//
// # The fence table
//
// One row per fence name, created by CreateTable or by the statement in
// Guard.CreateStatement (for PostgreSQL, with the default table name):
//
//	CREATE TABLE IF NOT EXISTS dlock_fences (
//		name  TEXT   PRIMARY KEY,
//		token BIGINT NOT NULL
//	)
//
// On MySQL and MariaDB (the MySQL dialect) the name is a VARBINARY(512)
// in an InnoDB table, so a fence name there is at most MySQLMaxFenceLen
// bytes; a longer one is dlock.ErrInvalidFence.
//
// # What it guarantees
//
// Among the transactions that called Check for one fence name and
// committed, the tokens are in commit order: no transaction with a lower
// token commits after one with a higher token. A transaction that checks
// while another holds the fence row waits for it (a row lock in PostgreSQL
// and InnoDB, the database's write lock in SQLite); if the other one recorded
// a higher token, Check returns a *dlock.StaleTokenError, which satisfies
// errors.Is(err, dlock.ErrStaleToken).
//
// What it does not do: protect writes made outside the transaction (a
// message sent, a file written, another database), or writes made by a path
// that does not call Check. Call Check first in the transaction, before the
// writes it guards; on SQLite, a transaction that reads before Check may fail
// with SQLITE_BUSY instead of waiting. Under REPEATABLE READ or SERIALIZABLE
// isolation a transaction that waited for the fence row may fail with a
// serialization error, which the caller retries as any other.
//
// On MySQL and MariaDB, Check reads the fence row with a locking read, so
// it judges the latest committed token under any isolation, REPEATABLE
// READ (InnoDB's default) included; but a transaction that read before
// Check keeps its older snapshot for the reads after it. When the fence
// row does not exist yet and the transaction that inserted it rolls back
// while two others wait, InnoDB may return a deadlock error (1213) to one
// of them: an error to retry, never a stale write. Creating the fence rows
// ahead (token 0) rules it out. See docs/fencing.md, section SQL.
//
// The tokens of a semaphore's permits and of a read-write lock's readers are
// granted to holders that run at the same time, so one fence for all of them
// would refuse all but the newest: fence per item instead (docs/fencing.md).
package sqlfence
