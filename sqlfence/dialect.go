package sqlfence

// Dialect is the SQL of one database engine for a fence table.
type Dialect struct {
	name string
	// create makes the table; %s is the table's name.
	create string
	// record inserts or raises the fence row and returns its token when
	// the caller's token is not older, no row when it is; %s is the
	// table's name, the arguments are (name, token).
	record string
	// recorded reads the fence row's token.
	recorded string
}

// String returns the dialect's name.
func (d Dialect) String() string { return d.name }

// The dialects. Each records the token with one upsert whose update is
// conditional on the recorded token being at most the caller's: the
// database takes the row's write lock for the statement and keeps it until
// the transaction ends, whether or not the condition held, so a concurrent
// Check of the same fence waits for this transaction and then sees its token.
var (
	// Postgres is PostgreSQL (9.5 and later), through any database/sql
	// driver (pgx's stdlib, lib/pq).
	Postgres = Dialect{
		name:     "postgres",
		create:   "CREATE TABLE IF NOT EXISTS %s (name TEXT PRIMARY KEY, token BIGINT NOT NULL)",
		record:   "INSERT INTO %[1]s AS f (name, token) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token RETURNING f.token",
		recorded: "SELECT token FROM %s WHERE name = $1",
	}

	// SQLite is SQLite (3.35 and later: RETURNING), through any
	// database/sql driver (modernc.org/sqlite, mattn/go-sqlite3). SQLite
	// has one writer at a time: the upsert takes the database's write lock
	// for the rest of the transaction.
	SQLite = Dialect{
		name:     "sqlite",
		create:   "CREATE TABLE IF NOT EXISTS %s (name TEXT PRIMARY KEY, token INTEGER NOT NULL)",
		record:   "INSERT INTO %s (name, token) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE token <= excluded.token RETURNING token",
		recorded: "SELECT token FROM %s WHERE name = ?1",
	}
)
