package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// serveEtcd is the child process started by startEtcd: a single-member
// embedded etcd on 127.0.0.1:port, and on mport an HTTP server with
// /metrics (etcd's Prometheus metrics, including the gRPC server's per-method
// counters) and /heap (runs a GC and reports the live heap in bytes). It
// exits when its standard input closes, that is when the parent goes away.
// v is the run's variant: etcd fsyncs its WAL unless it is nofsync.
func serveEtcd(dir, port, mport string, v variant) error {
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", port)}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = nil
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:2380"}}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = v == nofsync
	cfg.Metrics = "basic" // includes the per-method gRPC message counters
	// Leave everything else at etcd's defaults (tick 100 ms, election 1 s,
	// quotas), as a user's server would be.
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		return err
	case <-time.After(60 * time.Second):
		return fmt.Errorf("not ready after 60s")
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.HandleFunc("/heap", func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(w, "%d\n", ms.HeapAlloc)
	})
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", mport))
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(ln, mux) }()
	fmt.Println("READY")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
