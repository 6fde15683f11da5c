package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// defaultListen is where `dlock serve` listens and where every other
// command looks for a backend when neither --backend nor DLOCK_BACKEND is
// given. It is etcd's registered client port on loopback, so the default
// also finds an etcd that already runs on this machine.
const defaultListen = "127.0.0.1:2379"

// defaultBackend is the backend URL of a `dlock serve` with default flags.
const defaultBackend = "etcd://" + defaultListen

// etcdNode is a single-member etcd cluster running inside this process.
type etcdNode struct {
	etcd  *embed.Etcd
	addr  string // host:port clients connect to
	dir   string
	level zap.AtomicLevel // raised by Close: etcd logs its own shutdown as errors
}

// etcdConfig says how to start an etcdNode.
type etcdConfig struct {
	listen   string    // host:port for clients; port 0 picks a free one
	dataDir  string    // created if missing
	logLevel string    // etcd's levels: debug, info, warn, error
	log      io.Writer // where etcd's log lines go
}

// startEtcd starts a single-member etcd and waits until it serves clients
// or ctx ends.
//
// etcd needs a peer URL even with no peers. It is advertised but never
// listened on: a single member has nobody to talk to, and not binding a
// second port means `dlock serve` cannot fail on one the user never asked
// for.
func startEtcd(ctx context.Context, c etcdConfig) (*etcdNode, error) {
	host, port, err := net.SplitHostPort(c.listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: want host:port, such as %s", c.listen, defaultListen)
	}
	if port == "0" {
		// etcd advertises the address it was given; a real port is needed.
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", c.listen, err)
		}
		port = fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
		_ = ln.Close()
	}
	addr := net.JoinHostPort(host, port)
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}

	level := zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	if c.logLevel != "" {
		if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
			return nil, fmt.Errorf("log level %q: want debug, info, warn or error", c.logLevel)
		}
	}
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeCaller = nil
	enc.TimeKey = ""
	lg := zap.New(quietCore{zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(c.log), level)})

	cfg := embed.NewConfig()
	cfg.Name = "dlock"
	cfg.Dir = c.dataDir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.Named("etcd"))
	cfg.LogLevel = level.Level().String()
	clientURL := url.URL{Scheme: "http", Host: addr}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort(host, "2380")}
	cfg.ListenPeerUrls = nil
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Raft timing only matters for elections, and a single member elects
	// itself: short ticks make startup fast and let leases as short as one
	// second be granted (etcd's minimum TTL is 1.5 election timeouts).
	cfg.TickMs = 20
	cfg.ElectionMs = 200
	// An existing data dir means a restart: keep the data, as etcd does.
	if _, err := os.Stat(filepath.Join(c.dataDir, "member")); err == nil {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.Metrics = "basic"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, explainStartError(addr, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, explainStartError(addr, err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	case <-time.After(time.Minute):
		e.Close()
		return nil, fmt.Errorf("etcd in %s did not become ready within a minute", c.dataDir)
	}
	return &etcdNode{etcd: e, addr: addr, dir: c.dataDir, level: level}, nil
}

func explainStartError(addr string, err error) error {
	if strings.Contains(err.Error(), "address already in use") {
		return fmt.Errorf("cannot listen on %s: %w", addr, errAddrInUse)
	}
	return err
}

var errAddrInUse = errors.New("address already in use")

// URL returns the backend URL for this node.
func (n *etcdNode) URL() string { return "etcd://" + n.addr }

// Err reports a fatal error of the running server.
func (n *etcdNode) Err() <-chan error { return n.etcd.Err() }

// Close stops the server: in-flight requests finish, then the data is
// synced to disk.
func (n *etcdNode) Close() {
	// Closing makes etcd log "server has been stopped" and friends at
	// error level: expected here, so not shown.
	n.level.SetLevel(zapcore.FatalLevel)
	n.etcd.Close()
}

// quietCore drops what etcd logs as an error but is not one for a
// single-member server that may stop a moment after it started.
type quietCore struct{ zapcore.Core }

func (c quietCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	// The storage-version monitor runs before the first raft term is
	// persisted and retries later; a server stopped within that time
	// logs it once.
	if strings.HasPrefix(e.Message, "failed to update storage version") {
		return ce
	}
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c quietCore) With(fields []zapcore.Field) zapcore.Core { return quietCore{c.Core.With(fields)} }
