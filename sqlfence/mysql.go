package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
)

// MySQLMaxFenceLen is the longest fence name, in bytes, of the MySQL
// dialect: the fence table's name column is a VARBINARY(512) primary key
// (InnoDB indexes at most 767 bytes of a key in its older row formats, so
// the name has a limit, unlike PostgreSQL's and SQLite's TEXT). Twice
// dlock.MaxKeyLen, so that a lock's key with a prefix fits. A longer name
// is dlock.ErrInvalidFence, and nothing is sent.
const MySQLMaxFenceLen = 512

// MySQL is MySQL (8.0 and later) and MariaDB (10.5 and later) with the
// fence table in InnoDB, through any database/sql driver
// (github.com/go-sql-driver/mysql).
//
// The name column is VARBINARY, not VARCHAR: names compare byte for byte,
// as in the other dialects. Under a VARCHAR's usual collations, "Job" and
// "job", or "job" and "job ", would be one fence, and the tokens of two
// locks would be compared with each other.
//
// MySQL has no RETURNING on an upsert, and what ON DUPLICATE KEY UPDATE
// reports as rows affected depends on the connection's CLIENT_FOUND_ROWS
// flag, so Check takes the row's lock first and compares in Go (see
// mysqlRecorder).
var MySQL = Dialect{
	name: "mysql",
	// ENGINE=InnoDB: a table in MyISAM or Aria (a server's
	// default_storage_engine may say so) has no transactions and no row
	// locks, and Check would order nothing.
	create:  fmt.Sprintf("CREATE TABLE IF NOT EXISTS %%s (name VARBINARY(%d) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB", MySQLMaxFenceLen),
	maxName: MySQLMaxFenceLen,
	record:  mysqlRecorder{},
}

// mysqlRecorder records in three statements of the caller's transaction:
//
//  1. INSERT … ON DUPLICATE KEY UPDATE name = name creates the fence row
//     with token 0 if it is missing, and takes the row's exclusive lock
//     either way; a concurrent Check of the fence waits here until this
//     transaction ends.
//  2. SELECT … FOR UPDATE reads the recorded token. It must be a locking
//     read: under REPEATABLE READ (InnoDB's default) a plain SELECT reads
//     the transaction's snapshot, which may predate a newer holder's
//     commit, and would let an older token overwrite a newer one. A locking
//     read reads the latest committed row.
//  3. UPDATE writes the caller's token when the recorded one is lower.
//
// A row of token 0 is below every token, so a transaction that fails
// between 1 and 3 and still commits records nothing that matters.
//
// When the row is missing, two transactions that insert it at once do not
// deadlock (the second waits for the first's row lock, then finds the row),
// but when the first rolls back, InnoDB turns the lock of the row it had
// inserted into a gap lock for each waiter, and two or more waiters then
// wait for each other's gap lock to insert: InnoDB picks one as the victim,
// rolls its transaction back and returns ERROR 1213 (deadlock). That is an
// error, never a stale write: the caller retries the transaction. Pinned by
// storetest's TestCheck_mysqlTwoWaiters (MariaDB 10.11 deadlocks so each
// time, under every isolation level); a fence row created ahead never
// does.
type mysqlRecorder struct{}

func (mysqlRecorder) record(ctx context.Context, tx *sql.Tx, table, fence string, token int64) (bool, int64, error) {
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (name, token) VALUES (?, 0) ON DUPLICATE KEY UPDATE name = name", fence); err != nil {
		return false, 0, err
	}
	var got int64
	if err := tx.QueryRowContext(ctx, "SELECT token FROM "+table+" WHERE name = ? FOR UPDATE", fence).Scan(&got); err != nil {
		return false, 0, err
	}
	if got > token {
		return false, got, nil
	}
	if got < token {
		if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET token = ? WHERE name = ?", token, fence); err != nil {
			return false, 0, err
		}
	}
	return true, 0, nil
}
