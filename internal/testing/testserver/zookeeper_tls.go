package testserver

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ZooKeeperTLS is the secure client port of a ZooKeeper that
// StartZooKeeperTLS started, and the PEM files a client needs for it: the
// CA that signed the server's certificate (for 127.0.0.1 and localhost)
// and a client certificate with its key, signed by the same CA.
type ZooKeeperTLS struct {
	// Port is the secure client port, on 127.0.0.1.
	Port int
	// CAFile, CertFile and KeyFile are PEM files for a client.
	CAFile, CertFile, KeyFile string
	// ClientAuth is whether the server requires a client certificate
	// (ssl.clientAuth=need; otherwise none).
	ClientAuth bool

	serverPEM string // the server's key and certificate, ZooKeeper's PEM key store
}

// StartZooKeeperTLS starts a ZooKeeper of the test's own (not the shared
// one) with a secure client port besides the plain one, served by Netty
// as ZooKeeper requires for TLS, with certificates made for it. With
// clientAuth the server refuses clients without a certificate of its CA.
// t.Cleanup stops it.
func StartZooKeeperTLS(t testing.TB, clientAuth bool) *ZooKeeper {
	t.Helper()
	SkipIfShort(t)
	z := newZooKeeper(t)
	if os.Getenv("ZOOKEEPER_CLASSPATH") == "" {
		// Debian's zookeeper.jar names only some of Netty's jars, and its
		// netty-all.jar is empty.
		z.classpath += ":/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar"
	}
	tc, err := makeZKCerts(z.dir)
	if err != nil {
		z.Stop()
		t.Fatalf("testserver: zookeeper TLS certificates: %v", err)
	}
	tc.Port, tc.ClientAuth = FreePort(t), clientAuth
	z.tls = tc
	if err := z.start(); err != nil {
		log := z.logTail()
		z.Stop()
		t.Fatalf("testserver: zookeeper with TLS: %v\n%s", err, log)
	}
	t.Cleanup(z.Stop)
	return z
}

// TLS returns the secure client port and the client's files, or nil if
// the server has no secure port.
func (z *ZooKeeper) TLS() *ZooKeeperTLS { return z.tls }

// SecureAddr returns host:port of the secure client port.
func (z *ZooKeeper) SecureAddr() string { return Addr(z.tls.Port) }

// tlsConfig returns zoo.cfg's lines for the secure client port.
func (z *ZooKeeper) tlsConfig() string {
	if z.tls == nil {
		return ""
	}
	return fmt.Sprintf("secureClientPort=%d\nsecureClientPortAddress=127.0.0.1\n", z.tls.Port)
}

// tlsFlags returns the JVM's system properties for TLS: ZooKeeper reads
// the factory and the ssl.* settings from there.
func (z *ZooKeeper) tlsFlags() []string {
	if z.tls == nil {
		return nil
	}
	auth := "none"
	if z.tls.ClientAuth {
		auth = "need"
	}
	return []string{
		"-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
		"-Dzookeeper.ssl.keyStore.location=" + z.tls.serverPEM,
		"-Dzookeeper.ssl.keyStore.type=PEM",
		"-Dzookeeper.ssl.trustStore.location=" + z.tls.CAFile,
		"-Dzookeeper.ssl.trustStore.type=PEM",
		"-Dzookeeper.ssl.clientAuth=" + auth,
	}
}

// makeZKCerts writes, in dir, a CA, the server's key and certificate in
// one file, and a client's certificate and key.
func makeZKCerts(dir string) (*ZooKeeperTLS, error) {
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dlock test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
	}
	srvCert, srvKey, err := leaf(2, "localhost", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	cliCert, cliKey, err := leaf(3, "dlock test client", x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	tc := &ZooKeeperTLS{
		CAFile:    filepath.Join(dir, "ca.pem"),
		CertFile:  filepath.Join(dir, "client.pem"),
		KeyFile:   filepath.Join(dir, "client-key.pem"),
		serverPEM: filepath.Join(dir, "server.pem"),
	}
	for f, b := range map[string][]byte{
		tc.CAFile:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tc.CertFile:  cliCert,
		tc.KeyFile:   cliKey,
		tc.serverPEM: append(srvKey, srvCert...),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, err
		}
	}
	return tc, nil
}
