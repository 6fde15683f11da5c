package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/dlockdev/dlock/gateway"
)

// gatewaySecurity is what the gateway's security flags ask for, read and
// checked.
type gatewaySecurity struct {
	tls   *tls.Config           // nil: plain HTTP
	creds *gateway.Credentials  // nil: no --auth-tokens
	auth  gateway.Authenticator // nil: no authentication
	opts  []gateway.Option      // the rate and stream limits
}

// gatewaySecurityFlags are the flags' values.
type gatewaySecurityFlags struct {
	cert, key, clientCA, tokens *string
	rate, maxStreams            *int
	leaseKey                    *string
}

func addGatewaySecurityFlags(f *flags) gatewaySecurityFlags {
	return gatewaySecurityFlags{
		cert:       f.String("tls-cert", "", ""),
		key:        f.String("tls-key", "", ""),
		clientCA:   f.String("tls-client-ca", "", ""),
		tokens:     f.String("auth-tokens", "", ""),
		rate:       f.Int("rate-limit", 0, ""),
		maxStreams: f.Int("max-streams", 0, ""),
		leaseKey:   f.String("lease-key-file", "", ""),
	}
}

// gatewaySecurity reads the files the flags name and checks that a
// gateway listening on listen beyond loopback has TLS and an auth
// method. It returns ok=false with the exit status when it cannot serve.
func (c *cli) gatewaySecurity(f *flags, sf gatewaySecurityFlags, listen string) (*gatewaySecurity, int, bool) {
	s := &gatewaySecurity{}
	for _, n := range []struct {
		flag string
		v    int
	}{{"rate-limit", *sf.rate}, {"max-streams", *sf.maxStreams}} {
		if n.v < 0 {
			return nil, c.usageError("gateway", "%s %d: want 0 (no limit) or more", f.source(n.flag), n.v), false
		}
	}
	if *sf.rate > 0 {
		// Bursts of a second's worth: a client may catch up after a pause.
		s.opts = append(s.opts, gateway.RateLimit(float64(*sf.rate), *sf.rate))
	}
	if *sf.maxStreams > 0 {
		s.opts = append(s.opts, gateway.MaxStreamsPerClient(*sf.maxStreams))
	}
	if (*sf.cert == "") != (*sf.key == "") {
		return nil, c.usageError("gateway", "%s and %s go together: the certificate and its private key", f.source("tls-cert"), f.source("tls-key")), false
	}
	if *sf.clientCA != "" && *sf.cert == "" {
		return nil, c.usageError("gateway", "%s needs %s and %s: client certificates are checked in the TLS handshake", f.source("tls-client-ca"), f.source("tls-cert"), f.source("tls-key")), false
	}
	if host, _, _ := net.SplitHostPort(listen); !isLoopback(host) {
		var missing []string
		if *sf.cert == "" {
			missing = append(missing, "TLS (--tls-cert and --tls-key)")
		}
		if *sf.tokens == "" && *sf.clientCA == "" {
			missing = append(missing, "auth method (--auth-tokens or --tls-client-ca)")
		}
		switch len(missing) {
		case 1:
			return nil, c.fail(exitUsage, fmt.Errorf("%s %q is not a loopback address, and the gateway has no %s", f.source("listen"), listen, missing[0]),
				"anybody who reaches the gateway could take and release every lock, and read the tokens sent in clear text",
				"or listen on 127.0.0.1 or [::1], beside the services that use it"), false
		case 2:
			return nil, c.fail(exitUsage, fmt.Errorf("%s %q is not a loopback address, and the gateway has no %s and no %s", f.source("listen"), listen, missing[0], missing[1]),
				"anybody who reaches the gateway could take and release every lock, and read the tokens sent in clear text",
				"or listen on 127.0.0.1 or [::1], beside the services that use it"), false
		}
	}
	if *sf.cert != "" {
		cert, err := tls.LoadX509KeyPair(*sf.cert, *sf.key)
		if err != nil {
			return nil, c.fail(exitConfig, fmt.Errorf("%s %s, %s %s: %w", f.source("tls-cert"), *sf.cert, f.source("tls-key"), *sf.key, err)), false
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if *sf.clientCA != "" {
		pem, err := os.ReadFile(*sf.clientCA)
		if err != nil {
			return nil, c.fail(exitConfig, fmt.Errorf("%s: %w", f.source("tls-client-ca"), err)), false
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, c.fail(exitConfig, fmt.Errorf("%s %s: no PEM certificate in it", f.source("tls-client-ca"), *sf.clientCA)), false
		}
		s.tls.ClientAuth, s.tls.ClientCAs = tls.RequireAndVerifyClientCert, pool
		// Without a credentials file, the CA's word is enough: every
		// certificate it signed may do everything.
		s.auth = gateway.ClientCertificates(gateway.Admin)
	}
	if *sf.tokens != "" {
		creds, err := gateway.LoadCredentials(*sf.tokens)
		if err != nil {
			return nil, c.fail(exitConfig, fmt.Errorf("%s: %w", f.source("auth-tokens"), err)), false
		}
		s.creds, s.auth = creds, creds.Authenticate
	}
	if s.auth != nil {
		s.opts = append(s.opts, gateway.Authenticate(s.auth))
	}
	if *sf.leaseKey != "" {
		key, err := readLeaseKey(*sf.leaseKey)
		if err != nil {
			return nil, c.fail(exitConfig, fmt.Errorf("%s: %w", f.source("lease-key-file"), err),
				"make one with: head -c 32 /dev/urandom | base64 > FILE && chmod 600 FILE, and give every instance the same file"), false
		}
		s.opts = append(s.opts, gateway.LeaseKey(key))
	}
	return s, exitOK, true
}

// readLeaseKey reads the secret that signs lease ids: the file's bytes,
// less a final newline. Anybody who can read it can forge lease ids, as
// with a tokens file.
func readLeaseKey(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %v): whoever reads it can forge lease ids; chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) < gateway.MinLeaseKeyLen {
		return nil, fmt.Errorf("%s has %d bytes: a lease key needs at least %d", path, len(b), gateway.MinLeaseKeyLen)
	}
	return b, nil
}

// reloadOnHUP reads the credentials file again on each SIGHUP, until stop
// is called; a file that cannot be used leaves the principals as they
// were.
func (c *cli) reloadOnHUP(s *gatewaySecurity, path string) (stop func()) {
	if s.creds == nil {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-hup:
				if err := s.creds.Reload(); err != nil {
					fmt.Fprintf(c.stderr, "dlock: error: SIGHUP: %s; the principals are kept as they were\n", errorText(err))
					continue
				}
				fmt.Fprintf(c.stderr, "dlock: SIGHUP: %s reloaded\n", path)
			case <-done:
				return
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}

// isLoopback reports whether host, of a listen address, is this machine
// only.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
