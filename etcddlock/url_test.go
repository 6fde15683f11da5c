package etcddlock_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestOpen_badURL(t *testing.T) {
	ctx := testCtx(t)
	for raw, want := range map[string]string{
		"etcd://":                                "no host",
		"etcd://h1,,h2":                          "empty host",
		"etcd://host?ttl=3s":                     `unknown parameter "ttl"`,
		"etcd://host?dial_timeout=soon":          "dial_timeout",
		"etcd://host?dial_timeout=-1s":           "dial_timeout",
		"etcd://host?dial_timeout=":              "non-empty",
		"etcd://user@host":                       "needs a password",
		"etcd://host?cacert=/tmp/ca.pem":         "use etcds://",
		"etcds://host?cacert=/does/not/exist":    "cacert",
		"etcds://host?cert=/tmp/c.pem":           "both cert= and key=",
		"etcd://host?allow_unsafe_version=maybe": "allow_unsafe_version",
		"etcd://host?lease_per_grant=maybe":      "lease_per_grant",
	} {
		_, err := dlock.Open(ctx, raw)
		if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): %v, want ErrInvalidURL mentioning %q", raw, err, want)
		}
	}
}

// Nothing listens: Open fails within dial_timeout, naming the address.
func TestOpen_unreachable(t *testing.T) {
	ctx := testCtx(t)
	addr := testserver.Addr(testserver.FreePort(t))
	_, err := dlock.Open(ctx, "etcd://"+addr+"?dial_timeout=300ms")
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "etcds://") {
		t.Fatalf("Open: %v, want ErrUnavailable naming %s and hinting at the scheme", err, addr)
	}
	// Open's context bounds it too.
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := dlock.Open(sctx, "etcd://"+addr); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Open with a short context: %v, want ErrUnavailable", err)
	}
}

// With authentication on, a wrong password, no user, or a user without
// permission on the prefix give ErrAuth; the right user works.
func TestOpen_auth(t *testing.T) {
	ctx := testCtx(t)
	srv := startAuthEtcd(t, ctx, "s3cret/pw")

	for raw, why := range map[string]string{
		"etcd://alice:wrong@" + srv.Addr():                  "wrong password",
		"etcd://" + srv.Addr():                              "no user",
		"etcd://alice:s3cret%2Fpw@" + srv.Addr() + "/other": "no permission on the prefix",
	} {
		_, err := dlock.Open(ctx, raw)
		if !errors.Is(err, dlock.ErrAuth) || !strings.Contains(err.Error(), srv.Addr()) {
			t.Errorf("Open with %s: %v, want ErrAuth naming the address", why, err)
		}
		if err != nil && strings.Contains(err.Error(), "wrong") && strings.Contains(raw, "wrong") && strings.Contains(err.Error(), "alice:wrong") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	c, err := dlock.Open(ctx, "etcd://alice:s3cret%2Fpw@"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "with-auth")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "with-auth")
	if err != nil || len(info.Holders) == 0 || info.Holders[0].Token != l.Token() {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// etcds:// speaks TLS, verifying the server against cacert.
func TestOpen_TLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	srv := testserver.StartEtcd(t, testserver.EtcdTLS(cert, key))
	ctx := testCtx(t)
	c, err := dlock.Open(ctx, "etcds://"+srv.Addr()+"?cacert="+ca)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "over-tls")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Not trusted, or not TLS at all: unreachable, with the scheme hint.
	for _, raw := range []string{"etcds://" + srv.Addr() + "?dial_timeout=500ms", "etcd://" + srv.Addr() + "?dial_timeout=500ms"} {
		if _, err := dlock.Open(ctx, raw); !errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("Open(%q): %v, want ErrUnavailable", raw, err)
		}
	}
}

// writeCerts writes a CA and a certificate for 127.0.0.1 signed by it.
func writeCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// The URL's path is the prefix of every etcd key: two prefixes are two
// independent lock spaces.
func TestOpen_prefixFromPath(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	a, err := dlock.Open(ctx, srv.URL()+"/team-a/locks")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, srv.URL()+"/team-b/")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	key := "prefix/" + t.Name()
	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("same key under another prefix: %v", err)
	}
	for _, p := range []string{"team-a/locks/", "team-b/"} {
		resp, err := admin.Get(ctx, p+"prefix%2F"+t.Name()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 1 {
			t.Errorf("entries under %q: %v, %v; want 1", p, resp, err)
		}
	}
	_ = la.Unlock(ctx)
	_ = lb.Unlock(ctx)
}

// startAuthEtcd starts an etcd with authentication on: user root, and user
// alice with the given password and read-write access to the prefix
// "dlock/" only. Passwords are hashed at bcrypt's lowest cost: the tests
// are not about bcrypt.
func startAuthEtcd(t *testing.T, ctx context.Context, alicePassword string) *testserver.Etcd {
	t.Helper()
	srv := testserver.StartEtcd(t, testserver.EtcdFlags("--bcrypt-cost=4"))
	admin := adminClient(t, srv.Addr())
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.UserAdd(ctx, "root", "rootpw"))
	must(admin.UserGrantRole(ctx, "root", "root"))
	must(admin.RoleAdd(ctx, "locker"))
	must(admin.RoleGrantPermission(ctx, "locker", "dlock/", clientv3.GetPrefixRangeEnd("dlock/"), clientv3.PermissionType(clientv3.PermReadWrite)))
	must(admin.UserAdd(ctx, "alice", alicePassword))
	must(admin.UserGrantRole(ctx, "alice", "locker"))
	must(admin.AuthEnable(ctx))
	return srv
}
