// Package storetest holds sqlfence's tests against real databases: a
// PostgreSQL server, a MariaDB server and SQLite files, started or created
// by the tests. It is a module of its own so that the drivers it needs
// (pgx, go-sql-driver/mysql, modernc's SQLite) and redisdlock stay out of
// sqlfence's go.mod: `go mod tidy` in a module that imports sqlfence loads
// the tests of sqlfence's package too, and would download every module
// they import.
package storetest
