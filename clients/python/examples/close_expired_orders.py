"""The seeds' scheduled job through the gateway: close the expired orders
under a lock, each write fenced by the lease's token in the same SQLite
transaction, so that a holder that lost its lease (paused past its TTL) is
refused once a newer holder has written.

    python3 close_expired_orders.py http://127.0.0.1:8420 orders.db
"""

import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dlockgw  # noqa: E402

KEY = "jobs/close-expired-orders"
SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL);
"""


class StaleTokenError(Exception):
    """A newer holder of the lock has written: this one's lease has ended."""


def open_db(path):
    db = sqlite3.connect(path, isolation_level=None)  # transactions by hand
    db.executescript(SCHEMA)
    return db


def close_expired_orders(db, fence, token, now=None):
    """Close the orders expired by ``now``, if ``token`` is not below the
    highest token ``fence`` has seen; return how many were closed.

    The fence check and the write are one transaction (BEGIN IMMEDIATE takes
    SQLite's write lock first), so no newer holder writes in between."""
    now = time.time() if now is None else now
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("INSERT OR IGNORE INTO fences (name, token) VALUES (?, 0)", (fence,))
        cur = db.execute("UPDATE fences SET token = ? WHERE name = ? AND token <= ?", (token, fence, token))
        if cur.rowcount != 1:
            (recorded,) = db.execute("SELECT token FROM fences WHERE name = ?", (fence,)).fetchone()
            raise StaleTokenError("fence %r: token %d is below %d" % (fence, token, recorded))
        n = db.execute("UPDATE orders SET status = 'closed' WHERE status = 'open' AND expires_at < ?", (now,)).rowcount
        db.execute("COMMIT")
        return n
    except BaseException:
        db.execute("ROLLBACK")
        raise


def main(argv):
    if len(argv) != 3:
        print("usage: close_expired_orders.py GATEWAY_URL DB", file=sys.stderr)
        return 2
    client = dlockgw.Client(argv[1])
    db = open_db(argv[2])
    with client.lock(KEY, ttl=10, wait=30) as lease:
        n = close_expired_orders(db, KEY, lease.token)
        print("closed %d orders under token %d" % (n, lease.token))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
