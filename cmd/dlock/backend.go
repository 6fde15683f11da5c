package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/redisdlock"

	// Backends register their URL schemes with dlock.Open.
	_ "github.com/dlockdev/dlock/etcddlock"
	_ "github.com/dlockdev/dlock/zkdlock"
)

// quietClientLogs stops client libraries from logging on their own: dlock
// reports every failure that matters itself, once, with the address and a
// hint, and a CLI's stderr belongs to PROGRAM as much as to dlock. Only
// go-redis needs telling: its logger is process-wide, and writes to stderr
// unless replaced; nil drops its messages.
func quietClientLogs() {
	redisdlock.SetRedisLogger(nil)
}

// defaultConnectTimeout bounds dlock.Open: long enough for a TLS handshake
// across a continent, short enough that a wrong address fails while the
// user still looks at the terminal.
const defaultConnectTimeout = 5 * time.Second

// backendFlags are the flags of every command that talks to a lock server.
type backendFlags struct {
	url     *string
	timeout *time.Duration
}

func addBackendFlags(f *flags) backendFlags {
	return backendFlags{
		url:     f.String("backend", defaultBackend, ""),
		timeout: f.Duration("connect-timeout", defaultConnectTimeout, ""),
	}
}

// open connects to the backend. On failure it reports the error with a hint
// and returns ok=false with the exit status.
func (c *cli) open(ctx context.Context, b backendFlags, opts ...dlock.Option) (client *dlock.Client, code int, ok bool) {
	if *b.timeout <= 0 {
		return nil, c.usageError("", "--connect-timeout %v: must be positive", *b.timeout), false
	}
	octx, cancel := context.WithTimeout(ctx, *b.timeout)
	defer cancel()
	client, err := dlock.Open(octx, *b.url, opts...)
	if err != nil && ctx.Err() != nil {
		return nil, exitFailure, false // interrupted: the caller reports it
	}
	if err != nil {
		if octx.Err() != nil && ctx.Err() == nil && !errors.Is(err, dlock.ErrUnavailable) {
			err = fmt.Errorf("%w: no answer within %v (--connect-timeout): %w", dlock.ErrUnavailable, *b.timeout, err)
		}
		code, hints := c.explain(err, *b.url)
		if !errors.Is(err, dlock.ErrInvalidURL) {
			// An invalid URL's error names it already (open "…": …).
			err = fmt.Errorf("backend %s: %w", redactURL(*b.url), err)
		}
		return nil, c.fail(code, err, hints...), false
	}
	return client, exitOK, true
}

// explain maps an error from dlock to an exit status and hints about what
// to check.
func (c *cli) explain(err error, backendURL string) (code int, hints []string) {
	switch {
	case errors.Is(err, dlock.ErrInvalidURL):
		return exitConfig, []string{
			"backend URLs look like " + strings.Join(exampleURLs(), ", "),
			"set it with --backend or DLOCK_BACKEND; this dlock knows the schemes " + strings.Join(dlock.Schemes(), ", "),
		}
	case errors.Is(err, dlock.ErrAuth):
		return exitConfig, []string{"check the user name and password in the backend URL (--backend or DLOCK_BACKEND)"}
	case errors.Is(err, dlock.ErrUnavailable):
		if backendURL == defaultBackend {
			return exitUnavailable, []string{
				"no lock server answers at " + defaultListen + ", dlock's default; start one with `dlock serve`",
				"or point --backend (or DLOCK_BACKEND) at your etcd, Redis or ZooKeeper",
			}
		}
		return exitUnavailable, []string{"check that the server at " + hostOf(backendURL) + " is running and reachable from here (address, port, firewall, TLS)"}
	case errors.Is(err, dlock.ErrInvalidKey), errors.Is(err, dlock.ErrInvalidOption):
		return exitUsage, nil
	case errors.Is(err, errors.ErrUnsupported):
		return exitFailure, []string{"this backend cannot do it; etcd, Redis and ZooKeeper can"}
	}
	return exitFailure, nil
}

// exampleURLs lists one URL per kind of backend this dlock was built with.
func exampleURLs() []string {
	examples := map[string]string{
		"etcd":  defaultBackend,
		"redis": "redis://localhost:6379/0",
		"zk":    "zk://localhost:2181",
	}
	var out []string
	for _, s := range dlock.Schemes() {
		if e, ok := examples[s]; ok {
			out = append(out, e)
		}
	}
	return out
}

// redactURL hides the password in a backend URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "URL" // dlock.Open's error quotes it, password hidden
	}
	return u.Redacted()
}

// hostOf returns the host part of a backend URL, or the URL.
func hostOf(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return redactURL(s)
	}
	return u.Host
}
