package etcddlock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/tlsurl"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func init() {
	dlock.RegisterScheme("etcd", openURL)
	dlock.RegisterScheme("etcds", openURL)
}

// Open is dlock.Open for etcd URLs, for programs that prefer to name the
// backend. See the package documentation for the URL forms. It returns the
// errors of dlock.Open and of New.
func Open(ctx context.Context, rawURL string, opts ...dlock.Option) (*dlock.Client, error) {
	return dlock.Open(ctx, rawURL, opts...)
}

// urlParams are the query parameters an etcd URL may carry.
var urlParams = []string{"allow_unsafe_version", "cacert", "cert", "dial_timeout", "key", "lease_per_grant", "server_name"}

// config is what an etcd URL says.
type config struct {
	endpoints   []string // host:port
	prefix      string
	user, pass  string
	tls         *tls.Config // nil for etcd://
	dialTimeout time.Duration
	allowUnsafe bool // allow_unsafe_version
	perGrant    bool // lease_per_grant
}

// parseURL reads etcd://[user:password@]host[:port][,host[:port]…][/prefix][?params]
// and etcds://… (TLS).
func parseURL(u *url.URL) (*config, error) {
	c := &config{prefix: DefaultPrefix, dialTimeout: DefaultDialTimeout}
	if u.Opaque != "" || u.Host == "" {
		return nil, fmt.Errorf("no host: want %s://host:port[,host:port…][/prefix]", u.Scheme)
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, fmt.Errorf("empty host in %q", u.Host)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port: etcd's client port.
			host, port = strings.Trim(h, "[]"), "2379"
		}
		if host == "" || strings.ContainsAny(host, "[]") {
			return nil, fmt.Errorf("bad host %q", h)
		}
		c.endpoints = append(c.endpoints, net.JoinHostPort(host, port))
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		c.prefix = strings.TrimSuffix(p, "/") + "/"
	}
	if u.User != nil {
		c.user = u.User.Username()
		var ok bool
		if c.pass, ok = u.User.Password(); !ok || c.pass == "" || c.user == "" {
			return nil, fmt.Errorf("user %q needs a password: %s://user:password@host", c.user, u.Scheme)
		}
	}
	q := u.Query()
	for k := range q {
		if !slices.Contains(urlParams, k) {
			return nil, fmt.Errorf("unknown parameter %q (known: %s)", k, strings.Join(urlParams, ", "))
		}
		if len(q[k]) != 1 || q.Get(k) == "" {
			return nil, fmt.Errorf("parameter %q needs exactly one non-empty value", k)
		}
	}
	if s := q.Get("dial_timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("dial_timeout=%q: want a positive duration such as 5s", s)
		}
		c.dialTimeout = d
	}
	if s := q.Get("allow_unsafe_version"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("allow_unsafe_version=%q: want true or false", s)
		}
		c.allowUnsafe = b
	}
	if s := q.Get("lease_per_grant"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("lease_per_grant=%q: want true or false", s)
		}
		c.perGrant = b
	}
	var err error
	c.tls, err = tlsurl.Config(u.Scheme == "etcds", "etcds", q)
	return c, err
}

// openURL implements dlock.Opener.
func openURL(ctx context.Context, u *url.URL) (driver.Driver, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", driver.ErrInvalidURL, err) // dlock.Open names the URL
	}
	addr := strings.Join(c.endpoints, ",")
	timeout := c.dialTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	scheme := "http://"
	if c.tls != nil {
		scheme = "https://"
	}
	eps := make([]string, len(c.endpoints))
	for i, ep := range c.endpoints {
		eps[i] = scheme + ep
	}
	start := time.Now()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps,
		// Bounds the authentication that New does with a user name.
		DialTimeout: max(timeout, time.Millisecond),
		// Pings find a dead connection (a crashed host, a dropped NAT
		// entry) so that requests move to another endpoint.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		DialOptions:          DialOptions(),
		Username:             c.user,
		Password:             c.pass,
		TLS:                  c.tls,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		d := &etcdDriver{addr: addr, prefix: c.prefix}
		return nil, d.checkErr(ctx, err, time.Since(start))
	}
	d, err := newDriver(ctx, cli, cli.KV, clientv3.NewLease(cli), clientv3.NewWatcher(cli), &Options{Prefix: c.prefix, AllowUnsafeVersion: c.allowUnsafe, LeasePerGrant: c.perGrant}, cli, addr)
	if err != nil {
		return nil, err
	}
	return d, nil
}
