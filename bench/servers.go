package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The servers run as child processes on free loopback ports, in temporary
// directories, and die with the benchmark (Pdeathsig) if it is killed. All
// three keep nothing on disk that must survive (no fsync), the same for each:
// Redis without persistence, ZooKeeper with forceSync=no, etcd with
// UnsafeNoFsync.

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// server is a child process serving on addr.
type server struct {
	name string
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	log  string // path of the process log
	// extra, for etcd: the address of the child's metrics and heap endpoint.
	metricsAddr string
	stdin       io.WriteCloser
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// stop kills the process and removes its directory.
func (s *server) stop() {
	if s == nil || s.cmd == nil {
		return
	}
	if s.stdin != nil {
		_ = s.stdin.Close()
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
	_ = os.RemoveAll(s.dir)
}

func startProcess(name, dir, bin string, args []string) (*server, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, dir: dir, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(s.done)
	}()
	return s, nil
}

// waitReady calls check until it succeeds, the process exits or timeout passes.
func (s *server) waitReady(timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s exited before it was ready (%v); log:\n%s", s.name, err, tail(s.log))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %v; log:\n%s", s.name, timeout, err, tail(s.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// startRedis starts redis-server: with its built-in defaults for the durable
// variant, without persistence for nofsync; extra arguments are passed on.
func startRedis(v variant, extra ...string) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: apt-get install -y redis-server")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-bench-redis-")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning",
		"--maxclients", "20000",
	}
	if v == nofsync {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, extra...)
	s, err := startProcess("redis", dir, bin, args)
	if err != nil {
		return nil, err
	}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := s.waitReady(20*time.Second, func(ctx context.Context) error {
		_, err := rawCommand(ctx, s.addr, "PING\r\n", "+PONG")
		return err
	}); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// rawCommand writes cmd to addr and reads until the reply contains want
// (or the server closes the connection when want is empty).
func rawCommand(ctx context.Context, addr, cmd, want string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
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
	if want == "" {
		b, err := io.ReadAll(c)
		return string(b), err
	}
	var sb strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(sb.String(), want) {
		n, err := c.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String(), err
		}
	}
	return sb.String(), nil
}

// startZooKeeper starts a standalone ZooKeeper from the Debian package's
// jars with the stock tickTime (2 s) and a maxSessionTimeout of 10 minutes,
// so that the 100,000-key test can use a session timeout long enough that
// renewals do not dominate it.
//
// forceSync follows the variant: yes (ZooKeeper's default) for durable.
func startZooKeeper(v variant) (*server, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("java not found: apt-get install -y zookeeper")
	}
	cp := os.Getenv("ZOOKEEPER_CLASSPATH")
	if cp == "" {
		cp = "/usr/share/java/zookeeper.jar"
		if _, err := os.Stat(cp); err != nil {
			return nil, fmt.Errorf("%s not found: apt-get install -y zookeeper", cp)
		}
		if _, err := os.Stat("/usr/share/java/slf4j-simple.jar"); err == nil {
			cp += ":/usr/share/java/slf4j-simple.jar"
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-bench-zookeeper-")
	if err != nil {
		return nil, err
	}
	cfg := strings.Join([]string{
		"tickTime=2000",
		"dataDir=" + filepath.Join(dir, "data"),
		fmt.Sprintf("clientPort=%d", port),
		"clientPortAddress=127.0.0.1",
		"admin.enableServer=false",
		"4lw.commands.whitelist=mntr,srvr,ruok",
		"maxSessionTimeout=600000",
		"maxClientCnxns=0",
		"",
	}, "\n")
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	s, err := startProcess("zookeeper", dir, java, []string{
		"-Xms1g", "-Xmx1g", "-XX:+UseSerialGC",
		"-Djava.net.preferIPv4Stack=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.forceSync=" + map[variant]string{durable: "yes", nofsync: "no"}[v],
		// Reap empty container nodes (zkdlock's key nodes) within a second,
		// and all of them, so that one library's leftovers are gone before
		// the next library's memory is measured.
		"-Dznode.container.checkIntervalMs=1000",
		"-Dznode.container.maxPerMinute=100000000",
		"-cp", cp,
		"org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath,
	})
	if err != nil {
		return nil, err
	}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := s.waitReady(60*time.Second, func(ctx context.Context) error {
		out, err := rawCommand(ctx, s.addr, "srvr", "")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "Zookeeper version") {
			return fmt.Errorf("srvr said %q", out)
		}
		return nil
	}); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startEtcd starts the embedded etcd server (go.etcd.io/etcd/server/v3/embed,
// the version in go.mod) in a child process — this same binary, run as
// "serve-etcd" — so that it has its own runtime, heap and CPU accounting, as
// redis-server and ZooKeeper do. It fsyncs its WAL unless v is nofsync.
func startEtcd(v variant) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-bench-etcd-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "etcd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "serve-etcd", filepath.Join(dir, "data"), strconv.Itoa(port), strconv.Itoa(mport), string(v))
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{name: "etcd", dir: dir, cmd: cmd, done: make(chan struct{}), log: logPath, stdin: stdin,
		addr:        net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		metricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(mport))}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "READY" {
				ready <- nil
			}
		}
		ready <- errors.New("etcd child closed its output")
	}()
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(s.done)
	}()
	select {
	case err := <-ready:
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("%v; log:\n%s", err, tail(logPath))
		}
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("etcd not ready after 60s; log:\n%s", tail(logPath))
	}
	return s, nil
}

// httpGet fetches a URL on loopback with a timeout.
func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// rssBytes returns the resident set size of a process.
func rssBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n * 1024
			}
		}
	}
	return 0
}
