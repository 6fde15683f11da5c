package zkdlock_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// zksURL is a zks:// URL of z's secure client port at host, with params.
func zksURL(z *testserver.ZooKeeper, host string, params url.Values) string {
	_, port, _ := strings.Cut(z.SecureAddr(), ":")
	return "zks://" + host + ":" + port + "/dlock?" + params.Encode()
}

// lockOverTLS checks that a Client of rawURL locks and unlocks, and that a
// second Client of the same URL sees the lock held meanwhile.
func lockOverTLS(t *testing.T, rawURL string) {
	t.Helper()
	ctx := testCtx(t)
	a, err := dlock.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	defer b.Close()
	l, err := a.Lock(ctx, t.Name())
	if err != nil {
		t.Fatalf("Lock over TLS: %v", err)
	}
	if _, err := b.TryLock(ctx, t.Name()); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock of a held key over TLS: %v, want ErrLocked", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock over TLS: %v", err)
	}
	l, err = b.TryLock(ctx, t.Name())
	if err != nil {
		t.Fatalf("TryLock after Unlock over TLS: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// otherCA writes a CA certificate that signed nothing the server has.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestOpen_zks locks over ZooKeeper's secure client port: by address and
// by name (the certificate is checked against the name in the URL,
// although go-zookeeper dials the address it resolves to), and with an
// explicit server_name. A CA that did not sign the server's certificate is
// refused with ErrUnavailable, naming the verification failure.
func TestOpen_zks(t *testing.T) {
	z := testserver.StartZooKeeperTLS(t, false)
	ca := z.TLS().CAFile
	t.Run("address", func(t *testing.T) {
		lockOverTLS(t, zksURL(z, "127.0.0.1", url.Values{"cacert": {ca}}))
	})
	t.Run("name", func(t *testing.T) {
		lockOverTLS(t, zksURL(z, "localhost", url.Values{"cacert": {ca}}))
	})
	t.Run("server_name", func(t *testing.T) {
		lockOverTLS(t, zksURL(z, "127.0.0.1", url.Values{"cacert": {ca}, "server_name": {"localhost"}}))
	})
	t.Run("digest", func(t *testing.T) {
		// Digest credentials are sent over the TLS connection.
		lockOverTLS(t, strings.Replace(zksURL(z, "127.0.0.1", url.Values{"cacert": {ca}}), "zks://", "zks://alice:pw@", 1))
	})
	t.Run("wrongServerName", func(t *testing.T) {
		_, err := dlock.Open(testCtx(t), zksURL(z, "127.0.0.1", url.Values{"cacert": {ca}, "server_name": {"db.example"}, "connect_timeout": {"1s"}}))
		if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "db.example") {
			t.Fatalf("Open with a server_name not in the certificate: %v, want ErrUnavailable naming it", err)
		}
	})
	t.Run("wrongCA", func(t *testing.T) {
		_, err := dlock.Open(testCtx(t), zksURL(z, "127.0.0.1", url.Values{"cacert": {otherCA(t)}, "connect_timeout": {"1s"}}))
		if !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("Open with the wrong CA: %v, want ErrUnavailable", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "certificate signed by unknown authority") || !strings.Contains(msg, "cacert") {
			t.Fatalf("Open with the wrong CA: %q does not say that the certificate was not verified, nor point to cacert", msg)
		}
	})
	t.Run("plainClientOnSecurePort", func(t *testing.T) {
		_, port, _ := strings.Cut(z.SecureAddr(), ":")
		_, err := dlock.Open(testCtx(t), "zk://127.0.0.1:"+port+"/dlock?connect_timeout=1s")
		if !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("zk:// on the secure port: %v, want ErrUnavailable", err)
		}
	})
}

// TestOpen_zks_clientCertificate: a server that requires client
// certificates (ssl.clientAuth=need) serves a Client with cert= and key=,
// and refuses one without.
func TestOpen_zks_clientCertificate(t *testing.T) {
	z := testserver.StartZooKeeperTLS(t, true)
	tc := z.TLS()
	t.Run("withCert", func(t *testing.T) {
		lockOverTLS(t, zksURL(z, "127.0.0.1", url.Values{"cacert": {tc.CAFile}, "cert": {tc.CertFile}, "key": {tc.KeyFile}}))
	})
	t.Run("withoutCert", func(t *testing.T) {
		_, err := dlock.Open(testCtx(t), zksURL(z, "127.0.0.1", url.Values{"cacert": {tc.CAFile}, "connect_timeout": {"1s"}}))
		if !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("Open without a client certificate: %v, want ErrUnavailable", err)
		}
		if !strings.Contains(err.Error(), "tls") {
			t.Fatalf("Open without a client certificate: %q does not say TLS failed", err)
		}
	})
}
