package dlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/dlockdev/dlock/driver"
)

// Opener opens a driver for a parsed backend URL. Backend packages register
// one per URL scheme with RegisterScheme.
type Opener func(ctx context.Context, u *url.URL) (driver.Driver, error)

// The scheme registry is the one piece of package state in dlock, as in
// database/sql: it lets Open stay free of backend imports, so a program pulls
// in only the clients of the backends it imports.
var (
	schemesMu sync.RWMutex
	schemes   = map[string]Opener{}
)

// RegisterScheme makes Open use o for URLs with the given scheme. Backend
// packages call it from init. It panics if the scheme is registered twice,
// which is a programming error.
func RegisterScheme(scheme string, o Opener) {
	schemesMu.Lock()
	defer schemesMu.Unlock()
	if _, dup := schemes[scheme]; dup {
		panic("dlock: scheme registered twice: " + scheme)
	}
	schemes[scheme] = o
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	out := make([]string, 0, len(schemes))
	for s := range schemes {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open connects to the lock service named by rawURL, checks that it answers
// and accepts the credentials, and returns a Client. The scheme selects the
// backend, whose package must be imported (for its side effect, if nothing
// else) to register it:
//
//	import _ "github.com/dlockdev/dlock/redisdlock" // redis://, rediss://, redis+sentinel://, redis+cluster://
//
// Open returns errors satisfying errors.Is with ErrInvalidURL, ErrUnavailable
// or ErrAuth, ErrInvalidOption for a bad option (including a WithTTL that the
// backend cannot honour), or a backend's own sentinel (such as
// redisdlock.ErrUnsafeServer, etcddlock.ErrUnsafeServer); their text names
// the address and what to check. An invalid URL is shown with its password,
// and the values of parameters named like one, hidden.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w: cannot parse: %s", redactUnparsable(rawURL), ErrInvalidURL, parseReason(err))
	}
	schemesMu.RLock()
	o, ok := schemes[u.Scheme]
	schemesMu.RUnlock()
	if !ok {
		known := strings.Join(Schemes(), ", ")
		if known == "" {
			known = "none; import a backend package such as github.com/dlockdev/dlock/redisdlock"
		}
		return nil, fmt.Errorf("open %q: %w: unknown scheme %q (registered schemes: %s)", redactURL(rawURL, u), ErrInvalidURL, u.Scheme, known)
	}
	d, err := o(ctx, u)
	if errors.Is(err, ErrInvalidURL) {
		// Open owns the URL: drivers say only what is wrong with it.
		return nil, fmt.Errorf("open %q: %w", redactURL(rawURL, u), err)
	}
	if err != nil {
		return nil, err
	}
	c, err := NewClient(d, opts...)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return c, nil
}

// redactUnparsable hides what looks like a password in a URL that url.Parse
// rejected.
func redactUnparsable(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
		}
	}
	return s
}

// parseReason is what url.Parse found wrong, without the input, which its
// error quotes whole and which may hold a password. An escape error would
// quote three characters of it, perhaps of the password: it is not shown.
func parseReason(err error) string {
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		return "malformed"
	}
	var esc url.EscapeError
	if errors.As(uerr.Err, &esc) {
		return "invalid URL escape"
	}
	return uerr.Err.Error()
}

// redactURL renders a parsed URL for an error message, with the password
// and the values of query parameters named like a secret hidden.
func redactURL(rawURL string, u *url.URL) string {
	v := *u
	v.RawQuery = redactQuery(v.RawQuery)
	s := v.Redacted()
	if v.Host == "" && v.User == nil && v.Opaque == "" && strings.HasPrefix(rawURL, v.Scheme+"://") && !strings.HasPrefix(s, v.Scheme+"://") {
		// String drops an empty authority: show "zk://" as typed, not "zk:".
		s = v.Scheme + "://" + strings.TrimPrefix(s, v.Scheme+":")
	}
	return s
}

// redactQuery hides the values of parameters whose name mentions a password,
// a secret or a token (sentinel_password=…), keeping the order of the rest.
func redactQuery(q string) string {
	if q == "" {
		return q
	}
	parts := strings.Split(q, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		name = strings.ToLower(name)
		if hasValue && (strings.Contains(name, "password") || strings.Contains(name, "secret") || strings.Contains(name, "token")) {
			parts[i] = p[:strings.Index(p, "=")] + "=xxxxx"
		}
	}
	return strings.Join(parts, "&")
}
