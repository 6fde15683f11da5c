package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Redis is a redis-server started for a test: loopback only, no persistence.
type Redis struct {
	t       testing.TB
	bin     string
	dir     string
	port    int
	extra   []string
	env     []string  // added to the process's environment
	tls     *RedisTLS // nil: plain TCP
	process *Process
}

// StartRedis starts redis-server ($REDIS_SERVER_BIN or redis-server on PATH)
// on a free loopback port in a temporary directory, keeping nothing on disk.
// Extra arguments are passed through (for example "--requirepass", "s3cret").
// The server stops when the test ends.
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	return startRedis(t, nil, extra)
}

func startRedis(t testing.TB, env, extra []string) *Redis {
	t.Helper()
	return startRedisTLS(t, nil, env, extra)
}

func startRedisTLS(t testing.TB, c *RedisTLS, env, extra []string) *Redis {
	t.Helper()
	SkipIfShort(t)
	r := &Redis{
		t:     t,
		tls:   c,
		bin:   LookBinary(t, "REDIS_SERVER_BIN", "redis-server", "apt-get install -y redis-server"),
		dir:   t.TempDir(),
		port:  FreePort(t),
		extra: extra,
		env:   env,
	}
	// The free port may be taken by another process between FreePort and
	// the server's bind: try a few ports.
	for attempt := 1; ; attempt++ {
		err := r.start()
		if err == nil {
			return r
		}
		if attempt == 3 {
			t.Fatalf("testserver: redis-server on %s: %v", r.Addr(), err)
		}
		r.process.Kill()
		r.port = FreePort(t)
	}
}

// Addr returns host:port.
func (r *Redis) Addr() string { return Addr(r.port) }

// URL returns redis://host:port/0, or rediss://host:port/0 (with no TLS
// parameter) for a TLS server.
func (r *Redis) URL() string {
	if r.tls != nil {
		return "rediss://" + r.Addr() + "/0"
	}
	return "redis://" + r.Addr() + "/0"
}

func (r *Redis) start() error {
	r.t.Helper()
	ports := []string{"--port", strconv.Itoa(r.port)}
	if r.tls != nil {
		ports = append([]string{"--port", "0", "--tls-port", strconv.Itoa(r.port)}, r.tls.args()...)
	}
	args := append(ports,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	args = append(args, r.extra...)
	r.process = StartProcess(r.t, "redis-server", r.dir, r.bin, args, r.env...)
	return r.process.WaitReady(20*time.Second, r.ping)
}

// ping sends a raw PING; any reply (even NOAUTH) means the server is up.
func (r *Redis) ping(ctx context.Context) error {
	conf, err := r.tls.clientConfig()
	if err != nil {
		return err
	}
	c, err := dialRedis(ctx, r.Addr(), conf)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if n == 0 || (buf[0] != '+' && buf[0] != '-') {
		return fmt.Errorf("unexpected reply %q", buf[:n])
	}
	return nil
}

// Restart kills the server (SIGKILL: nothing is saved, and there is nothing
// on disk) and starts a new one on the same port, empty.
func (r *Redis) Restart() {
	r.t.Helper()
	r.process.Kill()
	if err := r.start(); err != nil {
		r.t.Fatalf("testserver: restart redis-server on %s: %v", r.Addr(), err)
	}
}

// Kill stops the server for good.
func (r *Redis) Kill() { r.process.Kill() }

// StartRedisForMain starts a redis-server for a TestMain, which has no
// testing.TB: the same server as StartRedis, stopped by the returned func.
func StartRedisForMain() (addr string, stop func(), err error) {
	bin := os.Getenv("REDIS_SERVER_BIN")
	if bin == "" {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return "", nil, fmt.Errorf("redis-server not found on PATH: install it (apt-get install -y redis-server) or run ./test.sh, which does")
		}
	}
	dir, err := os.MkdirTemp("", "dlock-redis-")
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	r := &Redis{port: port}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = r.ping(ctx)
		cancel()
		if err == nil {
			return r.Addr(), stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server on port %d not ready: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
