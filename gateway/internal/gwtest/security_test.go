package gwtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/gateway"
)

// Tokens of the credentials file the tests write (credentials).
const (
	tokOrders = "orders-token-0123456789abcdef" // lock:orders/ read:orders/
	tokReader = "reader-token-0123456789abcdef" // read:
	tokAdmin  = "admin-token-0123456789abcdef"  // admin
)

// credentials writes a credentials file whose principals' prefixes are
// under the test's own, and loads it.
func (e *env) credentials() *gateway.Credentials {
	e.T.Helper()
	path := filepath.Join(e.T.TempDir(), "tokens")
	content := fmt.Sprintf("# the tests' principals\n%s orders lock:%sorders/ read:%sorders/\n%s reader read:\n  %s root admin\n- client-a lock:%sorders/\n",
		tokOrders, e.Prefix, e.Prefix, tokReader, tokAdmin, e.Prefix)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		e.T.Fatal(err)
	}
	c, err := gateway.LoadCredentials(path)
	if err != nil {
		e.T.Fatal(err)
	}
	return c
}

// as is e sending token as its bearer token ("" for none).
func (e *env) as(token string) *env {
	c := *e
	c.reqHeader = http.Header{}
	if token != "" {
		c.reqHeader.Set("Authorization", "Bearer "+token)
	}
	return &c
}

// newAuthEnv is newEnv with the gateway authenticating by the test's
// credentials file (over plain HTTP: the Go package leaves TLS to its
// server).
func newAuthEnv(t *testing.T, opts ...gateway.Option) *env {
	t.Helper()
	var creds *gateway.Credentials
	e := newEnv(t, append(opts, gateway.Authenticate(func(r *http.Request) (gateway.Principal, error) {
		return creds.Authenticate(r)
	}))...)
	creds = e.credentials()
	return e
}

func TestAuth_missingOrWrongToken_401_nothingChanged(t *testing.T) {
	e := newAuthEnv(t)
	key := e.Key("orders/1")
	held := e.as(tokOrders).acquire(map[string]any{"key": key, "ttl_ms": 10000})
	e.want(held, http.StatusOK, "")
	id := held.Str("lease_id")
	other := e.Key("orders/2")

	for _, c := range []struct {
		name  string
		token string
	}{{"missing", ""}, {"wrong", "wrong-token-0123456789abcdef"}, {"a prefix of a good one", tokOrders[:20]}} {
		t.Run(c.name, func(t *testing.T) {
			x := e.as(c.token)
			r := x.acquire(map[string]any{"key": other})
			x.want(r, http.StatusUnauthorized, gateway.CodeUnauthenticated)
			if r.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate: %v", r.Header)
			}
			x.want(x.do(context.Background(), http.MethodDelete, "/v1/leases/"+id, nil), http.StatusUnauthorized, gateway.CodeUnauthenticated)
			x.want(x.do(context.Background(), http.MethodPost, "/v1/leases/"+id+"/renew", nil), http.StatusUnauthorized, gateway.CodeUnauthenticated)
			x.want(x.do(context.Background(), http.MethodGet, "/v1/keys/"+key, nil), http.StatusUnauthorized, gateway.CodeUnauthenticated)
			x.want(x.do(context.Background(), http.MethodPost, "/v1/stream-tickets", nil), http.StatusUnauthorized, gateway.CodeUnauthenticated)
			x.want(x.do(context.Background(), http.MethodGet, "/v1/watch?prefix="+escapeQuery(e.Prefix), nil), http.StatusUnauthorized, gateway.CodeUnauthenticated)
		})
	}
	if in := e.Info(other); len(in.Holders)+len(in.Waiters) != 0 {
		t.Fatalf("%s after refused acquires: %+v", other, in)
	}
	if in := e.Info(key); len(in.Holders) != 1 || in.Holders[0].Token != uint64(held.Num("token")) {
		t.Fatalf("%s after refused releases: %+v, want held by token %d", key, in.Holders, held.Num("token"))
	}
	// The dashboard's files and the API's description need no token:
	// the page must load to ask for one.
	for _, path := range []string{"/", "/dashboard/dashboard.js", "/openapi.yaml"} {
		e.want(e.as("").do(context.Background(), http.MethodGet, path, nil), http.StatusOK, "")
	}
	e.want(e.as(tokOrders).do(context.Background(), http.MethodDelete, "/v1/leases/"+id, nil), http.StatusOK, "")
}

func TestAuth_prefixPermissions_403_nothingChanged(t *testing.T) {
	e := newAuthEnv(t)
	orders, billing := e.as(tokOrders), e.as(tokReader)
	mine := e.Key("orders/1")
	theirs := e.Key("billing/1")

	// A principal allowed lock:…orders/ only.
	e.want(orders.acquire(map[string]any{"key": theirs}), http.StatusForbidden, gateway.CodeForbidden)
	e.want(orders.do(context.Background(), http.MethodPost, "/v1/hold", map[string]any{"key": theirs}), http.StatusForbidden, gateway.CodeForbidden)
	e.want(orders.do(context.Background(), http.MethodGet, "/v1/keys/"+theirs, nil), http.StatusForbidden, gateway.CodeForbidden)
	e.want(orders.do(context.Background(), http.MethodGet, "/v1/keys?prefix="+escapeQuery(e.Prefix), nil), http.StatusForbidden, gateway.CodeForbidden)
	e.want(orders.do(context.Background(), http.MethodGet, "/v1/keys?prefix="+escapeQuery(e.Key("orders/")), nil), http.StatusOK, "")
	// A read-only principal takes nothing.
	e.want(billing.acquire(map[string]any{"key": mine}), http.StatusForbidden, gateway.CodeForbidden)
	if in := e.Info(theirs); len(in.Holders)+len(in.Waiters) != 0 {
		t.Fatalf("%s after refused acquires: %+v", theirs, in)
	}
	if in := e.Info(mine); len(in.Holders)+len(in.Waiters) != 0 {
		t.Fatalf("%s after refused acquires: %+v", mine, in)
	}

	// A lease id is no use to a principal not allowed on its key.
	root := e.as(tokAdmin)
	held := root.acquire(map[string]any{"key": theirs, "ttl_ms": 10000})
	e.want(held, http.StatusOK, "")
	id := held.Str("lease_id")
	for _, path := range []string{"/renew", "/release", "/resign"} {
		e.want(orders.do(context.Background(), http.MethodPost, "/v1/leases/"+id+path, nil), http.StatusForbidden, gateway.CodeForbidden)
	}
	e.want(orders.do(context.Background(), http.MethodDelete, "/v1/leases/"+id, nil), http.StatusForbidden, gateway.CodeForbidden)
	e.want(orders.do(context.Background(), http.MethodGet, "/v1/leases/"+id, nil), http.StatusForbidden, gateway.CodeForbidden)
	if in := e.Info(theirs); len(in.Holders) != 1 {
		t.Fatalf("%s after refused releases: %+v, want still held", theirs, in)
	}
	// A waiter's ticket, the same.
	poll := root.acquire(map[string]any{"key": theirs, "wait_ms": 10})
	e.want(poll, http.StatusAccepted, "")
	e.want(orders.do(context.Background(), http.MethodDelete, "/v1/tickets/"+poll.Str("ticket"), nil), http.StatusForbidden, gateway.CodeForbidden)
	e.want(root.do(context.Background(), http.MethodDelete, "/v1/tickets/"+poll.Str("ticket"), nil), http.StatusOK, "")

	// Allowed: its own prefix, all the way.
	a := orders.acquire(map[string]any{"key": mine, "ttl_ms": 10000})
	e.want(a, http.StatusOK, "")
	e.want(orders.do(context.Background(), http.MethodPost, "/v1/leases/"+a.Str("lease_id")+"/renew", nil), http.StatusOK, "")
	e.want(orders.do(context.Background(), http.MethodGet, "/v1/keys/"+mine, nil), http.StatusOK, "")
	e.want(orders.do(context.Background(), http.MethodDelete, "/v1/leases/"+a.Str("lease_id"), nil), http.StatusOK, "")
	e.want(root.do(context.Background(), http.MethodDelete, "/v1/leases/"+id, nil), http.StatusOK, "")
}

// With authentication, a stream ticket carries the principal that fetched
// it, and its read permissions decide what the stream may show.
func TestAuth_streamTickets(t *testing.T) {
	e := newAuthEnv(t)
	orders := e.as(tokOrders)
	ticket := func(x *env) string {
		t.Helper()
		r := x.do(context.Background(), http.MethodPost, "/v1/stream-tickets", nil)
		e.want(r, http.StatusOK, "")
		return r.Str("stream_ticket")
	}
	// A ticket for a prefix beyond the principal's is refused, and spent.
	tk := ticket(orders)
	e.want(e.as("").do(context.Background(), http.MethodGet, "/v1/watch?prefix="+escapeQuery(e.Prefix)+"&stream_ticket="+tk, nil), http.StatusForbidden, gateway.CodeForbidden)
	e.want(e.as("").do(context.Background(), http.MethodGet, "/v1/observe/"+e.Key("billing/x")+"?stream_ticket="+ticket(orders), nil), http.StatusForbidden, gateway.CodeForbidden)

	// Within it, the stream opens with no other credentials.
	key := e.Key("orders/1")
	e.want(orders.acquire(map[string]any{"key": key, "ttl_ms": 10000}), http.StatusOK, "")
	w := e.watch("prefix="+escapeQuery(e.Key("orders/"))+"&stream_ticket="+ticket(orders), nil)
	ev := w.next(t)
	if ev.Event != "snapshot" || len(ev.Keys) != 1 || ev.Keys[0].Key != key {
		t.Fatalf("first event %+v, want a snapshot of %s", ev, key)
	}
	// Spent: it opens no second stream.
	e.want(e.as("").do(context.Background(), http.MethodGet, "/v1/watch?stream_ticket="+tk, nil), http.StatusNotFound, gateway.CodeTicketNotFound)

	// A principal that may read nothing gets no ticket.
	creds := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(creds, []byte("locker-token-0123456789ab locker lock:x/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := gateway.LoadCredentials(creds)
	if err != nil {
		t.Fatal(err)
	}
	e2 := newEnv(t, gateway.Authenticate(c.Authenticate))
	e2.want(e2.as("locker-token-0123456789ab").do(context.Background(), http.MethodPost, "/v1/stream-tickets", nil), http.StatusForbidden, gateway.CodeForbidden)
}

func TestCredentials_fileChecked(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"readable by others", "0123456789abcdef0 a admin\n", 0o644, "mode 0644"},
		{"no permission", "0123456789abcdef0 a\n", 0o600, ":1: want TOKEN NAME PERMISSION"},
		{"short token", "# c\nshort a admin\n", 0o600, ":2: a's token is shorter than 16"},
		{"bad permission", "0123456789abcdef0 a write:x\n", 0o600, `permission "write:x"`},
		{"same token twice", "0123456789abcdef0 a admin\n0123456789abcdef0 b admin\n", 0o600, ":2: b's token is a's too"},
		{"same name twice", "0123456789abcdef0 a admin\n- a admin\n", 0o600, `:2: principal "a" is named on line 1 too`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := gateway.LoadCredentials(write("f", c.content, c.mode))
			if !errors.Is(err, gateway.ErrCredentials) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LoadCredentials: %v, want ErrCredentials saying %q", err, c.want)
			}
			if strings.Contains(err.Error(), "0123456789abcdef0") {
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}

	// Reload replaces the principals, and keeps them when the file is bad.
	p := write("g", "first-token-0123456789 a admin\n", 0o600)
	c, err := gateway.LoadCredentials(p)
	if err != nil {
		t.Fatal(err)
	}
	authAs := func(token string) error {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		_, err := c.Authenticate(r)
		return err
	}
	write("g", "second-token-0123456789 a admin\n", 0o600)
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := authAs("first-token-0123456789"); !errors.Is(err, gateway.ErrUnauthenticated) {
		t.Fatalf("the replaced token: %v, want ErrUnauthenticated", err)
	}
	if err := authAs("second-token-0123456789"); err != nil {
		t.Fatalf("the new token: %v", err)
	}
	write("g", "bad\n", 0o600)
	if err := c.Reload(); !errors.Is(err, gateway.ErrCredentials) {
		t.Fatalf("Reload of a bad file: %v", err)
	}
	if err := authAs("second-token-0123456789"); err != nil {
		t.Fatalf("after a failed Reload, the old token: %v", err)
	}
}

func TestRateLimit_429WithRetryAfter(t *testing.T) {
	e := newAuthEnv(t, gateway.RateLimit(0.5, 3))
	orders, reader := e.as(tokOrders), e.as(tokReader)
	path := "/v1/keys?prefix=" + escapeQuery(e.Key("orders/"))
	for i := range 3 {
		e.want(orders.do(context.Background(), http.MethodGet, path, nil), http.StatusOK, "")
		_ = i
	}
	r := orders.do(context.Background(), http.MethodGet, path, nil)
	e.want(r, http.StatusTooManyRequests, gateway.CodeRateLimited)
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 2 {
		t.Fatalf("Retry-After %q, want 1 or 2 (seconds until a token at 0.5/s)", r.Header.Get("Retry-After"))
	}
	// Refused before anything is done.
	e.want(orders.acquire(map[string]any{"key": e.Key("orders/1")}), http.StatusTooManyRequests, gateway.CodeRateLimited)
	if in := e.Info(e.Key("orders/1")); len(in.Holders) != 0 {
		t.Fatalf("held after a refused acquire: %+v", in.Holders)
	}
	// Each principal has its own bucket.
	e.want(reader.do(context.Background(), http.MethodGet, path, nil), http.StatusOK, "")
}

func TestRateLimit_perAddressWithoutAuth(t *testing.T) {
	e := newEnv(t, gateway.RateLimit(0.5, 2))
	for range 2 {
		e.want(e.do(context.Background(), http.MethodGet, "/v1/keys?prefix="+escapeQuery(e.Prefix), nil), http.StatusOK, "")
	}
	e.want(e.do(context.Background(), http.MethodGet, "/v1/keys?prefix="+escapeQuery(e.Prefix), nil), http.StatusTooManyRequests, gateway.CodeRateLimited)
}

func TestMaxStreamsPerClient_429(t *testing.T) {
	e := newAuthEnv(t, gateway.MaxStreamsPerClient(1))
	orders := e.as(tokOrders)
	prefix := escapeQuery(e.Key("orders/"))
	w := e.watch("prefix="+prefix, http.Header{"Authorization": {"Bearer " + tokOrders}})
	if ev := w.next(t); ev.Event != "snapshot" {
		t.Fatalf("first event %+v", ev)
	}
	e.want(orders.do(context.Background(), http.MethodPost, "/v1/hold", map[string]any{"key": e.Key("orders/1")}), http.StatusTooManyRequests, gateway.CodeTooManyStreams)
	if in := e.Info(e.Key("orders/1")); len(in.Holders) != 0 {
		t.Fatalf("held after a refused hold: %+v", in.Holders)
	}
	// Another principal's streams are its own.
	w2 := e.watch("prefix="+prefix, http.Header{"Authorization": {"Bearer " + tokReader}})
	if ev := w2.next(t); ev.Event != "snapshot" {
		t.Fatalf("first event %+v", ev)
	}
	// The stream closed, its slot is free again: a hold of a key taken
	// is refused for that now, at once, rather than for the bound.
	taken := e.Key("orders/taken")
	e.want(e.as(tokAdmin).acquire(map[string]any{"key": taken, "ttl_ms": 10000}), http.StatusOK, "")
	w.resp.Body.Close()
	e.eventually("the closed stream is no longer counted", func() bool {
		r := orders.do(context.Background(), http.MethodPost, "/v1/hold", map[string]any{"key": taken})
		return r.Status == http.StatusConflict && r.Code() == gateway.CodeLocked
	})
}

// pki is a certificate authority for the tests, made with crypto/x509.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

var serial int64 = 100

// issue makes a certificate for cn, a server's for 127.0.0.1 or a
// client's, and returns it with its PEM forms.
func (p *pki) issue(t *testing.T, cn string, server bool) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c, certPEM, keyPEM
}

// newTLSEnv is newEnv served with TLS by a certificate of ca, requiring
// client certificates of clientCA when it is not nil.
func newTLSEnv(t *testing.T, ca, clientCA *pki, opts ...gateway.Option) *env {
	t.Helper()
	e := startEnv(t, "redis://"+redisAddr+"/0", func(srv *httptest.Server) {
		srvCert, _, _ := ca.issue(t, "gateway", true)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, MinVersion: tls.VersionTLS12}
		if clientCA != nil {
			pool := x509.NewCertPool()
			pool.AddCert(clientCA.cert)
			srv.TLS.ClientAuth, srv.TLS.ClientCAs = tls.RequireAndVerifyClientCert, pool
		}
		// The handshakes the tests make fail on purpose: not worth a log line.
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	}, opts...)
	e.client = tlsClient(ca, nil)
	return e
}

// tlsClient trusts ca only, and presents cert when given.
func tlsClient(ca *pki, cert *tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{RootCAs: pool}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

func TestTLS_netHTTPAndCurlWithTheCA(t *testing.T) {
	ca := newPKI(t, "dlock test CA")
	var creds *gateway.Credentials
	e := newTLSEnv(t, ca, nil, gateway.Authenticate(func(r *http.Request) (gateway.Principal, error) { return creds.Authenticate(r) }))
	creds = e.credentials()
	key := e.Key("orders/1")

	// net/http trusting the CA.
	a := e.as(tokOrders).acquire(map[string]any{"key": key, "ttl_ms": 10000})
	e.want(a, http.StatusOK, "")
	if in := e.Info(key); len(in.Holders) != 1 {
		t.Fatalf("not held after a grant over TLS: %+v", in)
	}
	// Not trusting it: refused at the handshake.
	if _, err := http.Get(e.Srv.URL + "/openapi.yaml"); err == nil {
		t.Fatal("a client that does not trust the CA connected")
	}

	// curl --cacert.
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	e.want(e.curl("--cacert", caFile, "-H", "Authorization: Bearer "+tokOrders, "-X", "POST", "$GW/v1/leases/"+a.Str("lease_id")+"/renew"), http.StatusOK, "")
	e.want(e.curl("--cacert", caFile, "-X", "POST", "$GW/v1/leases/"+a.Str("lease_id")+"/renew"), http.StatusUnauthorized, gateway.CodeUnauthenticated)
	e.want(e.curl("--cacert", caFile, "-H", "Authorization: Bearer "+tokOrders, "-X", "DELETE", "$GW/v1/leases/"+a.Str("lease_id")), http.StatusOK, "")
	if in := e.Info(key); len(in.Holders) != 0 {
		t.Fatalf("held after curl's release: %+v", in)
	}
}

func TestMTLS_clientCertificates(t *testing.T) {
	ca := newPKI(t, "dlock test CA")
	other := newPKI(t, "another CA")
	var creds *gateway.Credentials
	e := newTLSEnv(t, ca, ca, gateway.Authenticate(func(r *http.Request) (gateway.Principal, error) { return creds.Authenticate(r) }))
	creds = e.credentials()
	key := e.Key("orders/1")

	// A certificate of another CA: refused at the handshake.
	stranger, _, _ := other.issue(t, "client-a", false)
	_, err := e.try(context.Background(), http.MethodPost, "/v1/acquire", map[string]any{"key": key})
	if err == nil {
		t.Fatal("a client with no certificate connected")
	}
	x := *e
	x.client = tlsClient(ca, &stranger)
	if _, err := x.try(context.Background(), http.MethodPost, "/v1/acquire", map[string]any{"key": key}); err == nil {
		t.Fatal("a client with another CA's certificate connected")
	}
	if in := e.Info(key); len(in.Holders) != 0 {
		t.Fatalf("held after refused handshakes: %+v", in)
	}

	// The CA's certificate for client-a: the principal of the file's
	// "- client-a" line, with its permissions.
	good, _, _ := ca.issue(t, "client-a", false)
	x.client = tlsClient(ca, &good)
	a := x.acquire(map[string]any{"key": key, "ttl_ms": 10000})
	e.want(a, http.StatusOK, "")
	e.want(x.acquire(map[string]any{"key": e.Key("billing/1")}), http.StatusForbidden, gateway.CodeForbidden)
	e.want(x.do(context.Background(), http.MethodDelete, "/v1/leases/"+a.Str("lease_id"), nil), http.StatusOK, "")
	// A certificate the file does not name.
	nobody, _, _ := ca.issue(t, "client-b", false)
	x.client = tlsClient(ca, &nobody)
	e.want(x.acquire(map[string]any{"key": key}), http.StatusUnauthorized, gateway.CodeUnauthenticated)

	// ClientCertificates: every verified certificate, named by its CN.
	e2 := newTLSEnv(t, ca, ca, gateway.Authenticate(gateway.ClientCertificates(gateway.Permissions{{Action: gateway.ActionRead}})))
	e2.client = tlsClient(ca, &nobody)
	e2.want(e2.do(context.Background(), http.MethodGet, "/v1/keys?prefix="+escapeQuery(e2.Prefix), nil), http.StatusOK, "")
	r := e2.acquire(map[string]any{"key": e2.Key("k")})
	e2.want(r, http.StatusForbidden, gateway.CodeForbidden)
	if !strings.Contains(r.Str("message")+r.Raw, "client-b may not lock") {
		t.Fatalf("the refusal does not name the certificate's principal: %s", r.Raw)
	}
}

func TestPermission_parseAndAllows(t *testing.T) {
	for _, s := range []string{"lock:orders/", "read:", "admin"} {
		p, err := gateway.ParsePermission(s)
		if err != nil || p.String() != s {
			t.Errorf("ParsePermission(%q) = %v, %v; want it back", s, p, err)
		}
	}
	for _, s := range []string{"", "lock", "write:x", "admin:x", "read:a\x01"} {
		if _, err := gateway.ParsePermission(s); !errors.Is(err, gateway.ErrInvalidOption) {
			t.Errorf("ParsePermission(%q): %v, want ErrInvalidOption", s, err)
		}
	}
	ps := gateway.Permissions{{Action: gateway.ActionLock, Prefix: "orders/"}}
	for _, c := range []struct {
		a    gateway.Action
		key  string
		want bool
	}{
		{gateway.ActionLock, "orders/1", true},
		{gateway.ActionLock, "orders", false},
		{gateway.ActionLock, "billing/1", false},
		{gateway.ActionRead, "orders/1", false},
	} {
		if got := ps.Allows(c.a, c.key); got != c.want {
			t.Errorf("Allows(%s, %q) = %v", c.a, c.key, got)
		}
	}
	if !gateway.Admin.Allows(gateway.ActionRead, "x") || !gateway.Admin.Allows(gateway.ActionLock, "") {
		t.Error("Admin does not allow everything")
	}
}
