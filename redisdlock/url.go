package redisdlock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/tlsurl"
	"github.com/redis/go-redis/v9"
)

func init() {
	for _, s := range []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"} {
		dlock.RegisterScheme(s, openURL)
	}
}

// Open is dlock.Open for Redis URLs, for programs that prefer to name the
// backend. See the package documentation for the URL forms. It returns the
// errors of dlock.Open and of New (ErrUnsafeServer among them).
func Open(ctx context.Context, rawURL string, opts ...dlock.Option) (*dlock.Client, error) {
	return dlock.Open(ctx, rawURL, opts...)
}

// openURL implements dlock.Opener.
func openURL(ctx context.Context, u *url.URL) (driver.Driver, error) {
	q := u.Query()
	var o Options
	var err error
	if o.Prefix, err = takeParam(q, "prefix", func(s string) (string, error) { return s, nil }); err != nil {
		return nil, badURL(err)
	}
	if o.WaiterTimeout, err = takeParam(q, "waiter_timeout", time.ParseDuration); err != nil {
		return nil, badURL(err)
	}
	if o.PollInterval, err = takeParam(q, "poll_interval", time.ParseDuration); err != nil {
		return nil, badURL(err)
	}
	if o.AllowEviction, err = takeParam(q, "allow_eviction", strconv.ParseBool); err != nil {
		return nil, badURL(err)
	}
	if o.WaitReplicas, err = takeParam(q, "wait_replicas", strconv.Atoi); err != nil {
		return nil, badURL(err)
	}
	if o.WaitTimeout, err = takeParam(q, "wait_timeout", time.ParseDuration); err != nil {
		return nil, badURL(err)
	}
	od, err := o.withDefaults()
	if err != nil {
		return nil, badURL(err)
	}
	rdb, err := newUniversalClient(u, q)
	if err != nil {
		return nil, badURL(err)
	}
	if err := checkWaitTimeout(rdb, od); err != nil {
		_ = rdb.Close()
		return nil, badURL(err)
	}
	d, err := newDriver(ctx, rdb, &o, true, u.Host)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return d, nil
}

// newUniversalClient builds the go-redis client for a URL whose dlock
// parameters have been taken out of q.
func newUniversalClient(u *url.URL, q url.Values) (redis.UniversalClient, error) {
	// rediss, rediss+sentinel, rediss+cluster: every connection over TLS.
	base, _, _ := strings.Cut(u.Scheme, "+")
	tlsConf, err := tlsurl.Config(base == "rediss", strings.Replace(u.Scheme, "redis", "rediss", 1), q)
	if err != nil {
		return nil, err
	}
	for _, k := range tlsurl.Params {
		q.Del(k)
	}
	v := *u
	v.RawQuery = q.Encode()
	switch u.Scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(v.String())
		if err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true
		o.TLSConfig = keepSkipVerify(tlsConf, o.TLSConfig)
		return redis.NewClient(o), nil
	case "redis+cluster", "rediss+cluster":
		hosts := strings.Split(u.Host, ",")
		v.Scheme, v.Host = base, hosts[0]
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		v.RawQuery = q.Encode()
		o, err := redis.ParseClusterURL(v.String())
		if err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true
		o.TLSConfig = keepSkipVerify(tlsConf, o.TLSConfig)
		return redis.NewClusterClient(o), nil
	case "redis+sentinel", "rediss+sentinel":
		return newSentinelClient(u, q, tlsConf)
	}
	return nil, fmt.Errorf("unsupported scheme %q", u.Scheme)
}

// keepSkipVerify carries go-redis' skip_verify URL option, which it set in
// parsed, over to conf, the configuration dlock's TLS parameters describe.
func keepSkipVerify(conf, parsed *tls.Config) *tls.Config {
	if conf != nil && parsed != nil && parsed.InsecureSkipVerify {
		conf.InsecureSkipVerify = true
	}
	return conf
}

// newSentinelClient handles redis+sentinel://[user:pass@]s1:26379,s2:26379/master[/db]
// ?sentinel_username=&sentinel_password=; tlsConf, if not nil, is used for
// the Sentinels and the data nodes alike.
func newSentinelClient(u *url.URL, q url.Values, tlsConf *tls.Config) (redis.UniversalClient, error) {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if parts[0] == "" {
		return nil, fmt.Errorf("the master name is missing: redis+sentinel://host:port/MASTER[/db]")
	}
	o := &redis.FailoverOptions{
		MasterName:            parts[0],
		SentinelAddrs:         strings.Split(u.Host, ","),
		ContextTimeoutEnabled: true,
		TLSConfig:             tlsConf,
	}
	if len(parts) > 1 {
		if _, err := fmt.Sscanf(parts[1], "%d", &o.DB); err != nil {
			return nil, fmt.Errorf("bad database number %q", parts[1])
		}
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	o.SentinelUsername = q.Get("sentinel_username")
	o.SentinelPassword = q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	for k := range q {
		return nil, fmt.Errorf("unknown option %q", k)
	}
	return redis.NewFailoverClient(o), nil
}

// takeParam removes name from q and parses it; an absent name yields the zero value.
func takeParam[T any](q url.Values, name string, parse func(string) (T, error)) (T, error) {
	var zero T
	if !q.Has(name) {
		return zero, nil
	}
	s := q.Get(name)
	q.Del(name)
	v, err := parse(s)
	if err != nil {
		return zero, fmt.Errorf("option %s: %w", name, err) // err quotes s
	}
	return v, nil
}

// badURL makes err, which says what is wrong with the URL, ErrInvalidURL;
// dlock.Open names the URL, with the password hidden.
func badURL(err error) error {
	return fmt.Errorf("%w: %w", driver.ErrInvalidURL, err)
}
