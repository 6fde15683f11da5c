package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlockdev/dlock/gateway"
)

// defaultGatewayListen is where `dlock gateway` listens unless told: on
// loopback, next to the services that use it.
const defaultGatewayListen = "127.0.0.1:8420"

// gatewayShutdown bounds the releases of the gateway's leases at exit:
// what is not released by then, the backend frees when its TTL runs out.
const gatewayShutdown = 10 * time.Second

func (c *cli) cmdGateway(ctx context.Context, args []string) int {
	f := newFlags("gateway")
	b := addBackendFlags(f)
	listen := f.String("listen", defaultGatewayListen, "")
	maxLeases := f.Int("max-leases", gateway.DefaultMaxLeases, "")
	maxWaiters := f.Int("max-waiters", gateway.DefaultMaxWaiters, "")
	sf := addGatewaySecurityFlags(f)
	if _, code, ok := c.parse(f, args, 0); !ok {
		return code
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return c.usageError("gateway", "%s %q: want HOST:PORT, such as %s", f.source("listen"), *listen, defaultGatewayListen)
	}
	sec, code, ok := c.gatewaySecurity(f, sf, *listen)
	if !ok {
		return code
	}
	opts := sec.opts
	for _, o := range []struct {
		flag string
		n    int
		opt  func(int) gateway.Option
	}{{"max-leases", *maxLeases, gateway.MaxLeases}, {"max-waiters", *maxWaiters, gateway.MaxWaiters}} {
		if o.n < 1 {
			return c.usageError("gateway", "%s %d: must be at least 1", f.source(o.flag), o.n)
		}
		opts = append(opts, o.opt(o.n))
	}

	if *sf.leaseKey != "" {
		*b.url = leasePerGrant(*b.url)
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client, code, ok := c.open(ctx, b)
	if !ok {
		if ctx.Err() != nil {
			return exitSignal + int(syscall.SIGINT)
		}
		return code
	}
	defer client.Close()
	gw, err := gateway.New(client, opts...)
	if err != nil {
		return c.fail(exitUsage, err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return c.fail(exitUnavailable, fmt.Errorf("cannot listen on %s: %w", *listen, err), "choose another address with --listen (or DLOCK_LISTEN)")
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, TLSConfig: sec.tls}
	scheme, serve := "http", func() error { return srv.Serve(ln) }
	if sec.tls != nil {
		// The certificate is in TLSConfig already.
		scheme, serve = "https", func() error { return srv.ServeTLS(ln, "", "") }
	}
	stopHUP := c.reloadOnHUP(sec, *sf.tokens)
	defer stopHUP()
	served := make(chan error, 1)
	go func() { served <- serve() }()
	fmt.Fprintf(c.stderr, "dlock: gateway for %s at %s://%s (API: /openapi.yaml); stop with Ctrl-C\n", redactURL(*b.url), scheme, ln.Addr())
	fmt.Fprintf(c.stderr, "dlock: dashboard: %s://%s/\n", scheme, ln.Addr())
	// The URL alone on stdout, for scripts that start it on port 0.
	fmt.Fprintf(c.stdout, "%s://%s\n", scheme, ln.Addr())

	select {
	case <-ctx.Done():
		stop() // a second signal now ends dlock at once
	case err := <-served:
		return c.fail(exitFailure, fmt.Errorf("gateway stopped serving: %w", err))
	}
	sctx, cancel := context.WithTimeout(context.Background(), gatewayShutdown)
	defer cancel()
	// The gateway first: its streams and long polls end, and its leases
	// are released, before the server waits for the requests to finish.
	cerr := gw.Close(sctx)
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = srv.Close()
	}
	if cerr != nil {
		return c.fail(exitFailure, fmt.Errorf("gateway stopped; some releases not confirmed (the backend frees those keys when their TTLs run out): %w", cerr))
	}
	fmt.Fprintln(c.stderr, "dlock: gateway stopped, its leases released")
	return exitOK
}

// leasePerGrant returns an etcd backend URL with lease_per_grant=true
// unless it says otherwise: instances sharing a lease key then serve each
// other's leases on etcd too, each grant on an etcd lease of its own. Any
// other URL is returned as it is.
func leasePerGrant(backend string) string {
	u, err := url.Parse(backend)
	if err != nil || (u.Scheme != "etcd" && u.Scheme != "etcds") || u.Query().Has("lease_per_grant") {
		return backend // a bad URL is Open's to report
	}
	q := u.Query()
	q.Set("lease_per_grant", "true")
	u.RawQuery = q.Encode()
	return u.String()
}
