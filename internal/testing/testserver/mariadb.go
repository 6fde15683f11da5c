package testserver

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// MariaDB is a MariaDB server (Debian's mariadb-server package: mariadbd and
// mariadb-install-db) started for tests: a new data directory in a
// temporary directory, made by mariadb-install-db, and a mariadbd in the
// foreground listening on a free loopback port and on a Unix socket inside
// that directory. Stopping it is killing one child; nothing is left behind.
// The system service the package installs is not used, nor its
// configuration (--no-defaults).
//
// Its one account is MariaDBUser without a password. InnoDB runs without
// durability (no flush at commit, no doublewrite): nothing needs to survive
// the test.
//
// mariadbd refuses to run as root unless told --user=root. When the tests
// run as root (CI does) it is told so: the server then needs no other
// account, and the temporary directory no change of owner, which makes it
// work wherever the binary is installed (a mysql system user need not
// exist). Otherwise it runs as the current user.
//
// Like Postgres, it knows nothing of Go drivers: DSN gives the data source
// name of github.com/go-sql-driver/mysql, which the tests import.
type MariaDB struct {
	dbServer        // its dir holds data/, tmp/, the socket
	server   string // mariadbd
	client   string // mariadb, the command-line client
}

// MariaDBUser is the server's superuser; it needs no password.
const MariaDBUser = "root"

const mariadbInstall = "apt-get install -y mariadb-server"

var sharedMariaDB sharedServer[*MariaDB]

// SharedMariaDB returns the MariaDB server of this test binary, starting it
// on first use (mariadb-install-db takes two or three seconds, too long for
// every test). Tests share it: each takes its own database with
// NewDatabase. TestMain should call StopSharedMariaDB after m.Run. Its log
// goes to the log of the test that started it while that test runs, and is
// discarded afterwards.
func SharedMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	return sharedMariaDB.get(t, "mariadb", func(log io.Writer) (*MariaDB, error) {
		return startMariaDB(t, log)
	})
}

// StopSharedMariaDB stops the server SharedMariaDB started, if any, and
// removes its data.
func StopSharedMariaDB() { sharedMariaDB.stop() }

// StartMariaDB starts a MariaDB server for t alone, logging to t, stopped
// (and its data removed) when t ends.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	return startForTest(t, "mariadb", func(log io.Writer) (*MariaDB, error) {
		return startMariaDB(t, log)
	})
}

// MariaDBBinaries returns the paths of mariadbd, of the mariadb client and
// of mariadb-install-db: mariadbd from $DLOCK_MARIADB_BIN (a path) or PATH
// or /usr/sbin (Debian puts it there, off a normal user's PATH); the other
// two from mariadbd's ../bin, its own directory or PATH. It fails the test
// with the install command when one is missing.
func MariaDBBinaries(t testing.TB) (server, client, install string) {
	t.Helper()
	server = LookBinary(t, "DLOCK_MARIADB_BIN", "mariadbd", mariadbInstall, "/usr/sbin/mariadbd")
	dir := filepath.Dir(server)
	find := func(name string) string {
		for _, d := range []string{filepath.Join(dir, "..", "bin"), dir} {
			if p := filepath.Join(d, name); isFile(p) {
				return filepath.Clean(p)
			}
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		t.Fatalf("testserver: %s not found next to %s nor on PATH. Install it: %s — or run ./test.sh, which does.", name, server, mariadbInstall)
		return ""
	}
	return server, find("mariadb"), find("mariadb-install-db")
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// mariadbTuning are the options of both the bootstrap and the server: a
// small buffer pool and redo log (the defaults' 128 MB and 96 MB would be
// written to disk for nothing), and no durability.
var mariadbTuning = []string{
	"--innodb-buffer-pool-size=32M",
	"--innodb-log-file-size=8M",
	"--innodb-flush-log-at-trx-commit=0",
	"--innodb-doublewrite=0",
	// Native AIO (io_uring, libaio) is refused in some containers;
	// simulated AIO works everywhere and is fast enough for tests.
	"--innodb-use-native-aio=0",
	"--skip-log-bin",
	"--character-set-server=utf8mb4",
}

// startMariaDB starts a server with the binaries MariaDBBinaries finds
// for t.
func startMariaDB(t testing.TB, log io.Writer) (*MariaDB, error) {
	t.Helper()
	server, client, install := MariaDBBinaries(t)
	// SIGKILL: nothing needs to survive, and a clean shutdown would flush
	// the buffer pool for nothing.
	m := &MariaDB{dbServer: dbServer{name: "mariadb", quit: syscall.SIGKILL}, server: server, client: client}
	// Not t.TempDir: a long test name would make the socket's path longer
	// than a Unix socket's 108 bytes.
	if err := m.makeDir("tmp"); err != nil {
		return nil, err
	}
	// --no-defaults must come first. root gets an empty password
	// ("normal" authentication) rather than Debian's unix_socket only, so
	// that the tests log in over TCP; --skip-name-resolve makes the
	// accounts the script creates match 127.0.0.1 without a DNS lookup.
	args := append([]string{"--no-defaults", "--datadir=" + m.dataDir(),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}, m.asUser()...)
	args = append(args, mariadbTuning...)
	initdb := exec.Command(install, args...)
	initdb.Dir = m.dir
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	initdb.Stdout, initdb.Stderr = log, log
	initdb.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := initdb.Run(); err != nil {
		m.removeDir()
		return nil, fmt.Errorf("mariadb: %s in %s: %w (its output is in the test log)", install, m.dataDir(), err)
	}
	if err := m.startOnFreePort(func() error { return m.start(log) }); err != nil {
		return nil, err
	}
	return m, nil
}

// asUser is the option that lets mariadbd run as root, when we are root.
func (m *MariaDB) asUser() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

func (m *MariaDB) dataDir() string { return filepath.Join(m.dir, "data") }
func (m *MariaDB) tmpDir() string  { return filepath.Join(m.dir, "tmp") }

// Socket returns the path of the server's Unix socket.
func (m *MariaDB) Socket() string { return filepath.Join(m.dir, "mariadbd.sock") }

func (m *MariaDB) start(log io.Writer) error {
	args := append([]string{"--no-defaults", "--datadir=" + m.dataDir(),
		"--tmpdir=" + m.tmpDir(),
		"--socket=" + m.Socket(),
		"--pid-file=" + filepath.Join(m.dir, "mariadbd.pid"),
		"--port=" + strconv.Itoa(m.port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--max-connections=200",
		"--log-warnings=1",
	}, m.asUser()...)
	args = append(args, mariadbTuning...)
	cmd := exec.Command(m.server, args...)
	cmd.Dir = m.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.Stdout, cmd.Stderr = log, log // no --log-error: the log goes to stderr
	// Pdeathsig: a test binary that dies does not leave a server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return m.run(cmd, m.ready)
}

// query runs statements with the command-line client over TCP, as
// MariaDBUser.
func (m *MariaDB) query(ctx context.Context, sql string) ([]byte, error) {
	return exec.CommandContext(ctx, m.client, "--no-defaults", "--protocol=tcp",
		"-h", "127.0.0.1", "-P", strconv.Itoa(m.port), "-u", MariaDBUser,
		"--batch", "--skip-column-names", "-e", sql).CombinedOutput()
}

// ready runs a query over TCP, the way the tests connect: the port accepts
// connections a moment before the server serves them.
func (m *MariaDB) ready(ctx context.Context) error {
	if out, err := m.query(ctx, "SELECT 1"); err != nil {
		return fmt.Errorf("%v %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// DSN returns the data source name of database db for
// github.com/go-sql-driver/mysql, over TCP, e.g.
// root@tcp(127.0.0.1:3306)/test_1.
func (m *MariaDB) DSN(db string) string {
	return fmt.Sprintf("%s@tcp(%s)/%s", MariaDBUser, m.Addr(), db)
}

// NewDatabase creates an empty database of its own for a test on the
// server and returns its DSN. Tests on a shared server stay apart this
// way; the database goes when the server stops.
func (m *MariaDB) NewDatabase(t testing.TB) string {
	t.Helper()
	return m.DSN(m.newDatabase(t, "create database", func(ctx context.Context, name string) ([]byte, error) {
		return m.query(ctx, "CREATE DATABASE "+name)
	}))
}
