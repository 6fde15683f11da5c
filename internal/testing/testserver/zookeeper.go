package testserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ZooKeeper is a standalone ZooKeeper server (the Debian package's jars, run
// by java) started for tests: loopback only, in a temporary directory, with
// a short tick so that sessions as short as 200 ms can be negotiated and
// empty container nodes are reaped within about 100 ms.
//
// Unlike redis-server, one ZooKeeper (a JVM) takes seconds to start, so a
// test package shares one: SharedZooKeeper starts it on first use and
// StopSharedZooKeeper, called from TestMain, stops it.
type ZooKeeper struct {
	java      string
	classpath string
	dir       string // config, data and log; removed by Stop
	port      int
	tls       *ZooKeeperTLS // nil: no secure client port

	mu   sync.Mutex
	cmd  *exec.Cmd     // guarded by mu
	done chan struct{} // closed when cmd has exited; guarded by mu
}

// ZooKeeper's tunables for tests.
const (
	// zkTick is the server's tickTime: sessions can be as short as two
	// ticks and expire on tick boundaries.
	zkTick = 100 * time.Millisecond
	// zkContainerCheck is how often the server reaps empty container nodes
	// (60 s by default).
	zkContainerCheck = 100 * time.Millisecond
)

var sharedZK struct {
	mu sync.Mutex
	zk *ZooKeeper
}

// SharedZooKeeper returns the ZooKeeper server of this test binary, starting
// it on first use. The java binary comes from $ZOOKEEPER_JAVA or PATH, the
// jars from $ZOOKEEPER_CLASSPATH or /usr/share/java/zookeeper.jar (whose
// manifest names its dependencies). Call StopSharedZooKeeper from TestMain
// after m.Run so that the JVM does not outlive the tests.
func SharedZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	SkipIfShort(t)
	sharedZK.mu.Lock()
	defer sharedZK.mu.Unlock()
	if sharedZK.zk != nil {
		return sharedZK.zk
	}
	z := newZooKeeper(t)
	if err := z.start(); err != nil {
		log := z.logTail()
		z.Stop()
		t.Fatalf("testserver: zookeeper: %v\n%s", err, log)
	}
	sharedZK.zk = z
	return z
}

// StopSharedZooKeeper stops the server SharedZooKeeper started, if any.
func StopSharedZooKeeper() {
	sharedZK.mu.Lock()
	defer sharedZK.mu.Unlock()
	if sharedZK.zk != nil {
		sharedZK.zk.Stop()
		sharedZK.zk = nil
	}
}

const zkInstall = "apt-get install -y zookeeper"

func newZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	java := LookBinary(t, "ZOOKEEPER_JAVA", "java", zkInstall+" (it depends on a Java runtime)", "/usr/bin/java")
	cp := os.Getenv("ZOOKEEPER_CLASSPATH")
	if cp == "" {
		jar := "/usr/share/java/zookeeper.jar"
		if _, err := os.Stat(jar); err != nil {
			t.Fatalf("testserver: %s not found (or set $ZOOKEEPER_CLASSPATH). Install it: %s — or run ./test.sh, which does.", jar, zkInstall)
		}
		cp = jar
		// A logging binding so that the server's warnings reach the log
		// file instead of a "no binding" notice.
		if _, err := os.Stat("/usr/share/java/slf4j-simple.jar"); err == nil {
			cp += ":/usr/share/java/slf4j-simple.jar"
		}
	}
	dir, err := os.MkdirTemp("", "dlock-zookeeper-")
	if err != nil {
		t.Fatalf("testserver: zookeeper: %v", err)
	}
	return &ZooKeeper{java: java, classpath: cp, dir: dir, port: FreePort(t)}
}

// Addr returns host:port.
func (z *ZooKeeper) Addr() string { return Addr(z.port) }

func (z *ZooKeeper) start() error {
	cfg := strings.Join([]string{
		fmt.Sprintf("tickTime=%d", zkTick.Milliseconds()),
		"dataDir=" + filepath.Join(z.dir, "data"),
		fmt.Sprintf("clientPort=%d", z.port),
		"clientPortAddress=127.0.0.1",
		"admin.enableServer=false",
		"4lw.commands.whitelist=*",
		"maxSessionTimeout=60000",
		"maxClientCnxns=0",
	}, "\n") + "\n" + z.tlsConfig()
	cfgPath := filepath.Join(z.dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(z.dir, "zookeeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(z.java,
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", // start fast, stay small
		"-Djava.net.preferIPv4Stack=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dzookeeper.admin.enableServer=false",
		fmt.Sprintf("-Dznode.container.checkIntervalMs=%d", zkContainerCheck.Milliseconds()),
		// No fsync: a killed server still finds its log in the page cache,
		// and tests do not survive power cuts.
		"-Dzookeeper.forceSync=no")
	cmd.Args = append(cmd.Args, z.tlsFlags()...)
	cmd.Args = append(cmd.Args, "-cp", z.classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	cmd.Dir = z.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", z.java, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	z.mu.Lock()
	z.cmd, z.done = cmd, done
	z.mu.Unlock()
	return z.waitReady(done, 60*time.Second)
}

// waitReady polls the srvr command until the server says it serves.
func (z *ZooKeeper) waitReady(exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, time.Second)
		out, err := z.FourLetterWord(attempt, "srvr")
		cancelAttempt()
		switch {
		case err != nil:
			last = err
		case !strings.HasPrefix(out, "Zookeeper version"):
			last = fmt.Errorf("srvr said %q", out)
		default:
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("server on %s exited before it was ready; last check: %w", z.Addr(), last)
		case <-ctx.Done():
			return fmt.Errorf("server on %s not ready after %v: %w", z.Addr(), timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FourLetterWord sends one of ZooKeeper's four-letter commands (srvr, mntr,
// cons, wchc…; all are allowed) and returns the answer.
func (z *ZooKeeper) FourLetterWord(ctx context.Context, cmd string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", z.Addr())
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Restart kills the server (SIGKILL) and starts it again on the same port
// with the same data directory: like a crash and a reboot, it keeps the
// tree, the sessions and the transaction ids.
func (z *ZooKeeper) Restart(t testing.TB) {
	t.Helper()
	z.kill()
	if err := z.start(); err != nil {
		t.Fatalf("testserver: zookeeper restart: %v\n%s", err, z.logTail())
	}
}

// Kill stops the server (SIGKILL) until Restart starts it again: an outage
// whose end the test chooses.
func (z *ZooKeeper) Kill() { z.kill() }

func (z *ZooKeeper) kill() {
	z.mu.Lock()
	cmd, done := z.cmd, z.done
	z.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Stop kills the server and removes its directory.
func (z *ZooKeeper) Stop() {
	z.kill()
	_ = os.RemoveAll(z.dir)
}

// logTail returns the end of the server's log, for failure messages.
func (z *ZooKeeper) logTail() string {
	b, err := os.ReadFile(filepath.Join(z.dir, "zookeeper.log"))
	if err != nil {
		return ""
	}
	const max = 8 << 10
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return "zookeeper log:\n" + string(b)
}
