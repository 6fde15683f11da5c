package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

func (c *cli) cmdServe(ctx context.Context, args []string) int {
	f := newFlags("serve")
	listen := f.String("listen", defaultListen, "")
	dataDir := f.String("data-dir", "", "")
	logLevel := f.String("log-level", "error", "")
	metricsAddr := addMetricsFlag(f)
	if _, code, ok := c.parse(f, args, 0); !ok {
		return code
	}
	host, port, err := net.SplitHostPort(*listen)
	if err != nil {
		return c.usageError("serve", "%s %q: want HOST:PORT, such as %s", f.source("listen"), *listen, defaultListen)
	}
	if *dataDir == "" && port == "0" {
		// A server on a random port is a throwaway: so is its data.
		tmp, err := os.MkdirTemp("", "dlock-serve-")
		if err != nil {
			return c.fail(exitFailure, err)
		}
		defer os.RemoveAll(tmp)
		*dataDir = tmp
	} else if *dataDir == "" {
		*dataDir = defaultDataDir(host, port)
	}

	if *metricsAddr != "" {
		// The default registry: the Go and process collectors, and the
		// embedded etcd's server metrics, which etcd registers there.
		stopMetrics, code, ok := c.serveMetrics("serve", f.source("metrics-addr"), *metricsAddr, prometheus.DefaultGatherer, true)
		if !ok {
			return code
		}
		defer stopMetrics()
	}

	// Stop on SIGINT or SIGTERM; a second one kills at once.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	node, err := startEtcd(ctx, etcdConfig{listen: *listen, dataDir: *dataDir, logLevel: *logLevel, log: c.stderr})
	switch {
	case errors.Is(err, errAddrInUse):
		return c.fail(exitUnavailable, err,
			"something already listens there: if it is an etcd (or another dlock serve), dlock can use it as it is",
			"otherwise choose another address with --listen (or DLOCK_LISTEN) and pass the same to the other commands with --backend")
	case err != nil && ctx.Err() != nil:
		return exitSignal + int(syscall.SIGINT)
	case err != nil:
		return c.fail(exitFailure, fmt.Errorf("cannot start etcd: %w", err), "check that the data directory "+*dataDir+" is writable and not used by another etcd")
	}

	fmt.Fprintf(c.stderr, "dlock: serving etcd at %s, data in %s; stop with Ctrl-C\n", node.URL(), *dataDir)
	if node.URL() != defaultBackend {
		fmt.Fprintf(c.stderr, "dlock: point the other commands at it with --backend %s or DLOCK_BACKEND=%s\n", node.URL(), node.URL())
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		c.warnf("%s is reachable from other machines, with no TLS and no authentication: anybody who reaches it can take and break locks", node.addr)
	}
	// The URL alone on stdout, for scripts that start it on port 0.
	fmt.Fprintln(c.stdout, node.URL())

	select {
	case <-ctx.Done():
		stop() // a second signal now ends dlock at once
		node.Close()
		fmt.Fprintln(c.stderr, "dlock: etcd stopped")
		return exitOK
	case err := <-node.Err():
		node.Close()
		return c.fail(exitFailure, fmt.Errorf("etcd failed: %w", err))
	}
}

// defaultDataDir is where `dlock serve` keeps etcd's data unless told: in
// the user's cache directory (locks are leases that expire within seconds,
// so nothing there is precious), one directory per listen address so that
// two servers never share one.
func defaultDataDir(host, port string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("dlock-%d", os.Getuid()))
	}
	name := "etcd-" + strings.NewReplacer(":", "_", "/", "_", "%", "_").Replace(host) + "-" + port
	return filepath.Join(base, "dlock", name)
}
