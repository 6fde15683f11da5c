package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/observability/dlockprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsShutdownTimeout bounds the wait for a scrape in progress when the
// command ends: a scraper that stalls must not keep dlock from exiting.
const metricsShutdownTimeout = time.Second

// addMetricsFlag adds --metrics-addr, the address of the /metrics endpoint;
// empty (the default) serves none.
func addMetricsFlag(f *flags) *string {
	return f.String("metrics-addr", "", "")
}

// clientMetrics are the metrics of `dlock run` and `dlock elect`: the
// client's leases (dlockprom) and the process's (Go runtime, CPU, memory,
// file descriptors), in a registry of their own.
func clientMetrics() (*dlockprom.Metrics, prometheus.Gatherer) {
	m := dlockprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m, reg
}

// withMetrics returns opts with the hooks that report to m, when m is not
// nil.
func withMetrics(opts []dlock.Option, m *dlockprom.Metrics) []dlock.Option {
	if m == nil {
		return opts
	}
	return append(opts, dlock.WithHooks(m.Hooks()))
}

// serveMetrics serves g at http://addr/metrics until the returned stop is
// called. It says where on stderr when asked to (verbose) or when port 0
// left the address to the system, for the user could not know it
// otherwise. On failure it reports the error and returns ok=false with the
// exit status.
func (c *cli) serveMetrics(cmd, source, addr string, g prometheus.Gatherer, verbose bool) (stop func(), code int, ok bool) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, c.usageError(cmd, "%s %q: want HOST:PORT, such as 127.0.0.1:9090 (port 0 picks a free one)", source, addr), false
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, c.fail(exitUnavailable, fmt.Errorf("%s: cannot serve metrics: %w", source, err),
			"choose another address with "+source), false
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln) // ErrServerClosed once stop shuts it down
	}()
	if verbose || port == "0" {
		fmt.Fprintf(c.stderr, "dlock: metrics at http://%s/metrics\n", ln.Addr())
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
			_ = srv.Close()
		}
		<-served
	}, exitOK, true
}

// startClientMetrics serves clientMetrics at f's --metrics-addr, if given,
// and returns the Metrics for the client's hooks (nil without the flag) and
// the function that stops serving them.
func (c *cli) startClientMetrics(f *flags, addr string, verbose bool) (m *dlockprom.Metrics, stop func(), code int, ok bool) {
	if addr == "" {
		return nil, func() {}, exitOK, true
	}
	m, g := clientMetrics()
	stop, code, ok = c.serveMetrics(f.cmd, f.source("metrics-addr"), addr, g, verbose)
	return m, stop, code, ok
}
