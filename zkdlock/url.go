package zkdlock

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
	"github.com/go-zookeeper/zk"
)

func init() {
	dlock.RegisterScheme("zk", openURL)
	dlock.RegisterScheme("zks", openURL)
}

// Open is dlock.Open for zk:// and zks:// (TLS) URLs, for programs that prefer to name the
// backend. See the package documentation for the URL form, and
// docs/zookeeper.md for every parameter. It returns the errors of
// dlock.Open and of New.
func Open(ctx context.Context, rawURL string, opts ...dlock.Option) (*dlock.Client, error) {
	return dlock.Open(ctx, rawURL, opts...)
}

// urlConfig is a parsed zk:// URL.
type urlConfig struct {
	servers        []string // host:port
	root           string
	sessionTimeout time.Duration
	connectTimeout time.Duration
	user, password string // digest credentials; empty user: none
	tickTime       time.Duration
	deployment     Deployment // standalone=true: Standalone; false: Ensemble; absent: Detect
	lockDelaySweep time.Duration
	tls            *tls.Config // zks://; nil for zk://
}

// The query parameters a zk:// URL may carry, with their meaning.
var urlParams = append([]string{"session_timeout", "connect_timeout", "tick_time", "standalone", "lock_delay_sweep"}, tlsurl.Params...)

func parseURL(u *url.URL) (urlConfig, error) {
	cfg := urlConfig{sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout, root: DefaultRoot, lockDelaySweep: DefaultLockDelaySweep}
	if u.Opaque != "" || u.Fragment != "" {
		return cfg, fmt.Errorf("expected %s://[user:password@]host:port[,host:port…][/root][?params]", u.Scheme)
	}
	if u.Host == "" {
		return cfg, fmt.Errorf("no server address: expected %s://host:port[,host:port…]", u.Scheme)
	}
	for _, h := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			if !strings.Contains(h, ":") || strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
				host, port, err = strings.Trim(h, "[]"), strconv.Itoa(zk.DefaultPort), nil
			}
		}
		if err != nil {
			return cfg, fmt.Errorf("bad server address %q: %w", h, err)
		}
		if host == "" {
			return cfg, fmt.Errorf("bad server address %q: no host", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return cfg, fmt.Errorf("bad server address %q: bad port", h)
		}
		cfg.servers = append(cfg.servers, net.JoinHostPort(host, port))
	}
	if p := u.Path; p != "" && p != "/" {
		if err := checkRoot(p); err != nil {
			return cfg, fmt.Errorf("root %q %w", p, err)
		}
		cfg.root = p
	}
	if u.User != nil {
		cfg.user = u.User.Username()
		pw, ok := u.User.Password()
		if cfg.user == "" || !ok {
			return cfg, fmt.Errorf("digest authentication needs both a user and a password: %s://user:password@host:port", u.Scheme)
		}
		cfg.password = pw
	}
	q := u.Query()
	for name := range q {
		if !slices.Contains(urlParams, name) {
			return cfg, fmt.Errorf("unknown parameter %q (known: %s)", name, strings.Join(urlParams, ", "))
		}
	}
	var err error
	if cfg.tls, err = tlsurl.Config(u.Scheme == "zks", "zks", q); err != nil {
		return cfg, err
	}
	if cfg.sessionTimeout, err = durationParam(q, "session_timeout", cfg.sessionTimeout); err != nil {
		return cfg, err
	}
	if cfg.sessionTimeout < dlock.MinTTL || cfg.sessionTimeout > dlock.MaxTTL {
		return cfg, fmt.Errorf("session_timeout=%v is outside [%v, %v]", cfg.sessionTimeout, dlock.MinTTL, dlock.MaxTTL)
	}
	if cfg.connectTimeout, err = durationParam(q, "connect_timeout", cfg.connectTimeout); err != nil {
		return cfg, err
	}
	if cfg.connectTimeout <= 0 {
		return cfg, fmt.Errorf("connect_timeout=%v must be positive", cfg.connectTimeout)
	}
	if cfg.tickTime, err = durationParam(q, "tick_time", 0); err != nil {
		return cfg, err
	}
	if _, ok := q["tick_time"]; ok && cfg.tickTime <= 0 {
		return cfg, fmt.Errorf("tick_time=%v must be positive", cfg.tickTime)
	}
	if vs, ok := q["standalone"]; ok {
		if len(vs) != 1 {
			return cfg, fmt.Errorf("parameter standalone given %d times", len(vs))
		}
		standalone, err := strconv.ParseBool(vs[0])
		if err != nil {
			return cfg, fmt.Errorf("parameter standalone=%q: want true or false", vs[0])
		}
		cfg.deployment = Ensemble
		if standalone {
			cfg.deployment = Standalone
		}
	}
	if err := checkTick(cfg.tickTime, cfg.deployment, cfg.sessionTimeout); err != nil {
		return cfg, fmt.Errorf("tick_time=%v: %v", cfg.tickTime, err)
	}
	if cfg.lockDelaySweep, err = durationParam(q, "lock_delay_sweep", cfg.lockDelaySweep); err != nil {
		return cfg, err
	}
	if cfg.lockDelaySweep <= 0 {
		return cfg, fmt.Errorf("lock_delay_sweep=%v must be positive", cfg.lockDelaySweep)
	}
	return cfg, nil
}

func durationParam(q url.Values, name string, def time.Duration) (time.Duration, error) {
	vs, ok := q[name]
	if !ok {
		return def, nil
	}
	if len(vs) != 1 {
		return 0, fmt.Errorf("parameter %s given %d times", name, len(vs))
	}
	d, err := time.ParseDuration(vs[0])
	if err != nil {
		return 0, fmt.Errorf("parameter %s=%q: want a duration such as 10s", name, vs[0])
	}
	return d, nil
}

// openURL implements dlock.Opener.
func openURL(ctx context.Context, u *url.URL) (driver.Driver, error) {
	cfg, err := parseURL(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", driver.ErrInvalidURL, err) // dlock.Open names the URL
	}
	info := &sessionInfo{tls: cfg.tls}
	if cfg.tls != nil {
		info.names = serverNames(ctx, cfg.servers)
	}
	timeout := func() time.Duration {
		if t := info.timeout(); t > 0 {
			return t
		}
		return cfg.sessionTimeout
	}
	// Before the first handshake, which it learns of.
	info.heard = newHeard(cfg.sessionTimeout, reportLag(cfg.tickTime, cfg.deployment, timeout))
	log := &zkLogger{}
	conn, info, err := connect(ctx, cfg.servers, cfg.sessionTimeout, cfg.connectTimeout, info, log)
	if err != nil {
		return nil, err
	}
	addr := strings.Join(cfg.servers, ",")
	o := Options{Root: cfg.root, ACL: zk.WorldACL(zk.PermAll), TickTime: cfg.tickTime, Deployment: cfg.deployment, LockDelaySweep: cfg.lockDelaySweep}
	identities := []string{} // not nil: check the root's ACL for anonymous clients too
	if cfg.user != "" {
		// addauth digest: go-zookeeper sends it again after every reconnect.
		err := call0(ctx, nil, cfg.sessionTimeout, func() error {
			return conn.AddAuth("digest", []byte(cfg.user+":"+cfg.password))
		})
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("%w: zookeeper at %s: add digest credentials of user %q: %w", driver.ErrAuth, addr, cfg.user, err)
		}
		mine := zk.DigestACL(zk.PermAll, cfg.user, cfg.password)
		o.ACL = append(mine, zk.WorldACL(zk.PermRead)...)
		identities = []string{"digest:" + mine[0].ID}
	}
	d := newDriver(conn, o, addr, timeout, info.heard)
	d.closeConn, d.zkLog, d.conns, d.dropConn = conn.Close, log, &info.conns, info.dropConn
	if err := d.init(ctx, identities); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}
