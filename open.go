package dlock

import (
	"context"
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
// or ErrAuth; their text names the address and what to check.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse quotes the input, which may hold a password: say less.
		return nil, fmt.Errorf("%w: cannot parse %q", ErrInvalidURL, redactUnparsable(rawURL))
	}
	schemesMu.RLock()
	o, ok := schemes[u.Scheme]
	schemesMu.RUnlock()
	if !ok {
		known := strings.Join(Schemes(), ", ")
		if known == "" {
			known = "none; import a backend package such as github.com/dlockdev/dlock/redisdlock"
		}
		return nil, fmt.Errorf("%w: unknown scheme %q in %q (registered schemes: %s)", ErrInvalidURL, u.Scheme, u.Redacted(), known)
	}
	d, err := o(ctx, u)
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
