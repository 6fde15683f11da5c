package testserver

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Postgres is a PostgreSQL server (the Debian package's binaries: initdb and
// postgres from /usr/lib/postgresql/<version>/bin) started for tests: a new
// cluster in a temporary directory, listening on a free loopback port and on
// a Unix socket inside that directory, with trust authentication for its one
// superuser and no fsync. The postgres process runs in the foreground (no
// pg_ctl daemon): stopping it is killing one child, and nothing is left
// behind.
//
// PostgreSQL refuses to run as root. When the tests run as root (CI does),
// initdb and postgres run as the "postgres" system user that the package
// creates, and the temporary directory belongs to that user; otherwise they
// run as the current user.
//
// The server knows nothing of Go drivers: a test connects with the one it
// uses, through DSN or URL. The package stays free of a driver so that the
// root module does not require one.
type Postgres struct {
	dbServer                     // its dir is the cluster's parent: data/, sock/
	bin      string              // the directory of initdb, postgres, pg_isready, createdb
	cred     *syscall.Credential // nil: run as ourselves
}

// PostgresUser is the cluster's superuser; it needs no password.
const PostgresUser = "dlock"

const postgresInstall = "apt-get install -y postgresql"

var sharedPG sharedServer[*Postgres]

// SharedPostgres returns the PostgreSQL server of this test binary, starting
// it on first use (initdb takes a second or two, too long for every test).
// Tests share it: each takes its own database with NewDatabase. TestMain
// should call StopSharedPostgres after m.Run. Its log is discarded once the
// test that started it has ended (t.Logf after a test ends panics); while
// that test runs it goes to its log.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	return sharedPG.get(t, "postgres", func(log io.Writer) (*Postgres, error) {
		return startPostgres(PostgresBinDir(t), log)
	})
}

// StopSharedPostgres stops the server SharedPostgres started, if any, and
// removes its cluster.
func StopSharedPostgres() { sharedPG.stop() }

// StartPostgres starts a PostgreSQL server for t alone, logging to t,
// stopped (and its cluster removed) when t ends.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return startForTest(t, "postgres", func(log io.Writer) (*Postgres, error) {
		return startPostgres(PostgresBinDir(t), log)
	})
}

// PostgresBinDir returns the directory of PostgreSQL's server binaries:
// $DLOCK_POSTGRES_BIN when set, else the newest
// /usr/lib/postgresql/<version>/bin (Debian's layout, where they are not on
// PATH), else the directory of initdb on PATH. It fails the test with the
// install command when there is none.
func PostgresBinDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("DLOCK_POSTGRES_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			t.Fatalf("testserver: DLOCK_POSTGRES_BIN=%s: %v", d, err)
		}
		return d
	}
	if d := newestPostgres("/usr/lib/postgresql"); d != "" {
		return d
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatalf("testserver: PostgreSQL not found (no /usr/lib/postgresql/<version>/bin/postgres, no initdb on PATH, no $DLOCK_POSTGRES_BIN). Install it: %s — or run ./test.sh, which does.", postgresInstall)
	return ""
}

// newestPostgres returns root/<version>/bin for the highest version that
// has a postgres binary, or "".
func newestPostgres(root string) string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return ""
	}
	var versions []float64
	dirs := map[float64]string{}
	for _, e := range entries {
		v, err := strconv.ParseFloat(e.Name(), 64) // "15", "9.6"
		bin := filepath.Join(root, e.Name(), "bin")
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(bin, "postgres")); err != nil {
			continue
		}
		versions = append(versions, v)
		dirs[v] = bin
	}
	if len(versions) == 0 {
		return ""
	}
	return dirs[slices.Max(versions)]
}

func startPostgres(bin string, log io.Writer) (*Postgres, error) {
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	// SIGQUIT is immediate shutdown: the postmaster tells its backends to
	// quit and exits; nothing needs to survive.
	pg := &Postgres{dbServer: dbServer{name: "postgres", quit: syscall.SIGQUIT}, bin: bin, cred: cred}
	// Not t.TempDir: its parents are private to the user running the test,
	// and the server may run as another user, who must reach the socket
	// and data directories.
	if err := pg.makeDir("sock"); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, d := range []string{pg.dir, pg.sockDir()} {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				pg.removeDir()
				return nil, fmt.Errorf("postgres: give %s to the postgres user: %w", d, err)
			}
		}
	}
	initdb := pg.command(log, "initdb",
		"--pgdata="+pg.dataDir(), "--username="+PostgresUser, "--auth=trust",
		"--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions")
	if err := initdb.Run(); err != nil {
		pg.removeDir()
		return nil, fmt.Errorf("postgres: initdb in %s: %w (its output is in the test log)", pg.dataDir(), err)
	}
	if err := pg.startOnFreePort(func() error { return pg.start(log) }); err != nil {
		return nil, err
	}
	return pg, nil
}

// postgresCredential returns the postgres system user's credential when we
// are root, nil otherwise.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres: running as root, and PostgreSQL refuses root: need the postgres system user that the package creates (%s): %w", postgresInstall, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres: user postgres has uid %q, gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func (pg *Postgres) dataDir() string { return filepath.Join(pg.dir, "data") }
func (pg *Postgres) sockDir() string { return filepath.Join(pg.dir, "sock") }

// command runs one of the cluster's binaries as the cluster's user.
func (pg *Postgres) command(log io.Writer, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(pg.bin, name), args...)
	cmd.Dir = pg.dir
	// A root's HOME and locale are not the postgres user's business.
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	cmd.Stdout, cmd.Stderr = log, log
	// Pdeathsig: a test binary that dies does not leave a server behind
	// (Go sets it after switching to the postgres user, so it holds).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Pdeathsig: syscall.SIGQUIT}
	return cmd
}

func (pg *Postgres) start(log io.Writer) error {
	cmd := pg.command(log, "postgres",
		"-D", pg.dataDir(),
		"-p", strconv.Itoa(pg.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+pg.sockDir(),
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
		// A test that deadlocks reports it within a second, not at the
		// test's timeout.
		"-c", "deadlock_timeout=1s",
	)
	return pg.run(cmd, pg.ready)
}

// ready runs pg_isready: a TCP connect alone succeeds while the server
// still answers "the database system is starting up".
func (pg *Postgres) ready(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, filepath.Join(pg.bin, "pg_isready"),
		"-q", "-h", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-U", PostgresUser, "-d", "postgres").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_isready: %v %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SocketDir returns the directory of the server's Unix socket.
func (pg *Postgres) SocketDir() string { return pg.sockDir() }

// URL returns a postgres:// URL of database db on the server's TCP port
// (sslmode=disable: the server has no certificate), e.g.
// postgres://dlock@127.0.0.1:5432/postgres?sslmode=disable.
func (pg *Postgres) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(PostgresUser), Host: pg.Addr(), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// NewDatabase creates an empty database of its own for a test on the
// server (createdb) and returns its URL. Tests on a shared server stay
// apart this way; the database goes when the server stops.
func (pg *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	return pg.URL(pg.newDatabase(t, "createdb", func(ctx context.Context, name string) ([]byte, error) {
		return exec.CommandContext(ctx, filepath.Join(pg.bin, "createdb"),
			"-h", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-U", PostgresUser, name).CombinedOutput()
	}))
}
