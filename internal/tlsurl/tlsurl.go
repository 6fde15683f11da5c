// Package tlsurl reads the TLS parameters every backend's URL takes the
// same way: cacert (a PEM file of the CAs to trust instead of the
// system's), cert and key (a client certificate, both or neither) and
// server_name (the name to verify the server's certificate against).
package tlsurl

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
)

// Params are the URL parameters Config reads.
var Params = []string{"cacert", "cert", "key", "server_name"}

// Config returns the TLS configuration that q's parameters describe, or
// nil if the scheme is not a TLS one (secure false) and q has none of
// them. A TLS parameter on a scheme without TLS is an error that names
// tlsScheme, the scheme to use instead.
func Config(secure bool, tlsScheme string, q url.Values) (*tls.Config, error) {
	if !secure {
		for _, k := range Params {
			if q.Has(k) {
				return nil, fmt.Errorf("parameter %q is for TLS: use %s://", k, tlsScheme)
			}
		}
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: q.Get("server_name")}
	if f := q.Get("cacert"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("cacert: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cacert: no PEM certificate in %s", f)
		}
	}
	switch cert, key := q.Get("cert"), q.Get("key"); {
	case cert != "" && key != "":
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("cert and key: %w", err)
		}
		t.Certificates = []tls.Certificate{kp}
	case cert != "" || key != "":
		return nil, fmt.Errorf("a client certificate needs both cert= and key=")
	}
	return t, nil
}
