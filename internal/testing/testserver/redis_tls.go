package testserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// RedisTLS is the TLS set-up of a Redis server, Sentinel or Cluster that
// speaks only TLS: its PEM files, and whether clients must present a
// certificate.
type RedisTLS struct {
	CAFile   string // the CA that signed CertFile, and that client certificates must chain to
	CertFile string // for 127.0.0.1, good as a server and as a client certificate
	KeyFile  string

	// RequireClientCert is tls-auth-clients yes; otherwise a client
	// certificate is optional (but checked if one is presented).
	RequireClientCert bool
}

// NewRedisTLS writes a fresh CA, and a certificate for 127.0.0.1 signed by
// it, into a temporary directory. Each call makes a different CA, so a
// second call's CAFile is a wrong CA for the first's servers.
func NewRedisTLS(t testing.TB) *RedisTLS {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Both uses: Redis presents its own certificate as a client to its
	// master, its Sentinels and the other cluster nodes.
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return &RedisTLS{
		CAFile:   write("ca.pem", "CERTIFICATE", caDER),
		CertFile: write("redis.pem", "CERTIFICATE", der),
		KeyFile:  write("redis-key.pem", "EC PRIVATE KEY", keyDER),
	}
}

// args are redis-server's and redis-sentinel's TLS arguments, the TLS port
// aside.
func (c *RedisTLS) args() []string {
	auth := "optional"
	if c.RequireClientCert {
		auth = "yes"
	}
	return []string{
		"--tls-cert-file", c.CertFile, "--tls-key-file", c.KeyFile,
		"--tls-ca-cert-file", c.CAFile, "--tls-auth-clients", auth,
	}
}

// clientConfig is the configuration of this package's own connections
// (readiness checks, cluster set-up): they present the certificate and do
// not verify the server, whose trust is the test's business.
func (c *RedisTLS) clientConfig() (*tls.Config, error) {
	if c == nil {
		return nil, nil
	}
	kp, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{kp}}, nil
}

// StartRedisTLS is StartRedis for a server that listens only with TLS
// (--port 0 --tls-port).
func StartRedisTLS(t testing.TB, c *RedisTLS, extra ...string) *Redis {
	t.Helper()
	return startRedisTLS(t, c, nil, extra)
}
