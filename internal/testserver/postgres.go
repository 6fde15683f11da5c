package testserver

import (
	"bytes"
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
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
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
	bin     string // the directory of initdb, postgres, pg_isready, createdb
	dir     string // the cluster's parent: data/, sock/, removed by Stop
	port    int
	cred    *syscall.Credential // nil: run as ourselves
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped sync.Once
	dbs     atomic.Int64 // databases made by NewDatabase
}

// PostgresUser is the cluster's superuser; it needs no password.
const PostgresUser = "dlock"

const postgresInstall = "apt-get install -y postgresql"

var sharedPG struct {
	mu sync.Mutex
	pg *Postgres
}

// SharedPostgres returns the PostgreSQL server of this test binary, starting
// it on first use (initdb takes a second or two, too long for every test).
// Tests share it: each takes its own database with NewDatabase. TestMain
// should call StopSharedPostgres after m.Run. Its log is discarded once the
// test that started it has ended (t.Logf after a test ends panics); while
// that test runs it goes to its log.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	SkipIfShort(t)
	sharedPG.mu.Lock()
	defer sharedPG.mu.Unlock()
	if sharedPG.pg == nil {
		bin := PostgresBinDir(t)
		log := &detachableLog{t: t, prefix: "postgres"}
		pg, err := startPostgres(bin, log)
		log.detach() // the server outlives this test; keep its log quiet from now on
		if err != nil {
			t.Fatalf("testserver: %v", err)
		}
		sharedPG.pg = pg
	}
	return sharedPG.pg
}

// StopSharedPostgres stops the server SharedPostgres started, if any, and
// removes its cluster.
func StopSharedPostgres() {
	sharedPG.mu.Lock()
	defer sharedPG.mu.Unlock()
	if sharedPG.pg != nil {
		sharedPG.pg.Stop()
		sharedPG.pg = nil
	}
}

// StartPostgres starts a PostgreSQL server for t alone, logging to t,
// stopped (and its cluster removed) when t ends.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	SkipIfShort(t)
	log := &detachableLog{t: t, prefix: "postgres"}
	pg, err := startPostgres(PostgresBinDir(t), log)
	if err != nil {
		log.detach()
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() {
		pg.Stop()
		log.detach()
	})
	return pg
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
	pg := &Postgres{bin: bin}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	pg.cred = cred
	// Not t.TempDir: its parents are private to the user running the test,
	// and the server may run as another user, who must reach the socket
	// and data directories.
	pg.dir, err = os.MkdirTemp("", "dlock-postgres-")
	if err != nil {
		return nil, fmt.Errorf("postgres: temp dir: %w", err)
	}
	if err := os.Mkdir(pg.sockDir(), 0o700); err != nil {
		pg.removeDir()
		return nil, fmt.Errorf("postgres: %w", err)
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
	// A free port may be taken between the check and the server's bind:
	// try a few.
	for range 3 {
		pg.port = freePort()
		if err = pg.start(log); err == nil {
			return pg, nil
		}
	}
	pg.removeDir()
	return nil, err
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
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres (%s): %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	pg.cmd, pg.exited = cmd, exited
	if err := pg.waitReady(60 * time.Second); err != nil {
		pg.kill()
		return fmt.Errorf("postgres on %s: %w", pg.Addr(), err)
	}
	return nil
}

// waitReady runs pg_isready until the server accepts connections: a TCP
// connect alone succeeds while it still answers "the database system is
// starting up".
func (pg *Postgres) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := exec.CommandContext(ctx, filepath.Join(pg.bin, "pg_isready"),
			"-q", "-h", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-U", PostgresUser, "-d", "postgres").CombinedOutput()
		cancel()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("pg_isready: %v %s", err, strings.TrimSpace(string(out)))
		select {
		case <-pg.exited:
			return fmt.Errorf("exited before it was ready (its log is in the test log; last check: %v)", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %v: %v", timeout, last)
}

// kill stops the postmaster with SIGQUIT (immediate shutdown: it tells its
// backends to quit and exits; nothing needs to survive), then SIGKILL if it
// has not exited within ten seconds.
func (pg *Postgres) kill() {
	if pg.cmd == nil {
		return
	}
	_ = pg.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-pg.exited:
	case <-time.After(10 * time.Second):
		_ = pg.cmd.Process.Kill()
		<-pg.exited
	}
	pg.cmd = nil
}

func (pg *Postgres) removeDir() { _ = os.RemoveAll(pg.dir) }

// Stop stops the server and removes its cluster.
func (pg *Postgres) Stop() {
	pg.stopped.Do(func() {
		pg.kill()
		pg.removeDir()
	})
}

// Addr returns the server's host:port.
func (pg *Postgres) Addr() string { return Addr(pg.port) }

// Port returns the server's port.
func (pg *Postgres) Port() int { return pg.port }

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
	name := fmt.Sprintf("test_%d", pg.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(pg.bin, "createdb"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-U", PostgresUser, name).CombinedOutput()
	if err != nil {
		t.Fatalf("testserver: createdb %s on %s: %v\n%s", name, pg.Addr(), err, out)
	}
	return pg.URL(name)
}

// detachableLog writes a server's output to a test's log, a line at a time,
// until detach, and discards it afterwards.
type detachableLog struct {
	mu     sync.Mutex
	t      testing.TB // nil once detached
	prefix string
	part   []byte // a line not yet ended
}

func (w *detachableLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		if w.t != nil {
			w.t.Logf("%s: %s", w.prefix, w.part[:i])
		}
		w.part = w.part[i+1:]
	}
	return len(p), nil
}

func (w *detachableLog) detach() {
	w.mu.Lock()
	w.t = nil
	w.mu.Unlock()
}
