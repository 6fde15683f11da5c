package gateway

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
)

// An Authenticator names the principal that sent a request, from its
// bearer token, its client certificate or anything else it carries. It
// returns an error satisfying errors.Is(err, ErrUnauthenticated) when the
// request has no valid credentials; any other error is answered with 500.
// It must be safe for concurrent use.
type Authenticator func(r *http.Request) (Principal, error)

// Principal is who sent a request, and what it may do.
type Principal struct {
	// Name identifies the principal in logs, and keys its rate limit
	// and its count of streams.
	Name string
	// Permissions are what it may do, on which keys.
	Permissions Permissions
}

// Action is what a Permission allows.
type Action string

const (
	// ActionLock allows acquire and hold (with their tickets), and the
	// renew, release, resign and proclaim of a lease on the key.
	ActionLock Action = "lock"
	// ActionRead allows inspect, list, watch, observe and leader, and a
	// stream ticket.
	ActionRead Action = "read"
	// ActionAdmin allows every action on every key.
	ActionAdmin Action = "admin"
)

// Permission allows an Action on the keys that start with Prefix (every
// key when Prefix is empty). Its text form is "lock:PREFIX",
// "read:PREFIX" or "admin".
type Permission struct {
	Action Action
	Prefix string
}

// ParsePermission parses the text form of a Permission: "lock:orders/"
// (lock keys under orders/), "read:" (read every key) or "admin". It
// returns an error satisfying errors.Is(err, ErrInvalidOption) for any
// other text.
func ParsePermission(s string) (Permission, error) {
	if s == string(ActionAdmin) {
		return Permission{Action: ActionAdmin}, nil
	}
	action, prefix, ok := strings.Cut(s, ":")
	if !ok || (action != string(ActionLock) && action != string(ActionRead)) {
		return Permission{}, fmt.Errorf("%w: permission %q: want lock:PREFIX, read:PREFIX or admin", ErrInvalidOption, s)
	}
	if err := validKey(prefix); err != nil && prefix != "" {
		return Permission{}, fmt.Errorf("%w: permission %q: the prefix is not a valid key: %s", ErrInvalidOption, s, err.message)
	}
	return Permission{Action: Action(action), Prefix: prefix}, nil
}

// String returns p's text form, which ParsePermission reads.
func (p Permission) String() string {
	if p.Action == ActionAdmin {
		return string(ActionAdmin)
	}
	return string(p.Action) + ":" + p.Prefix
}

// Permissions is what a principal may do: each of them allows something.
type Permissions []Permission

// Admin is the permission to do everything.
var Admin = Permissions{{Action: ActionAdmin}}

// Allows reports whether ps allow action on key.
func (ps Permissions) Allows(action Action, key string) bool {
	for _, p := range ps {
		if p.Action == ActionAdmin || (p.Action == action && strings.HasPrefix(key, p.Prefix)) {
			return true
		}
	}
	return false
}

// Authenticate makes the gateway require credentials on every request but
// for its dashboard's page and files and its OpenAPI document: a, called
// for each request, names its principal, whose Permissions decide what it
// may do (403 forbidden otherwise). A request a refuses gets 401
// unauthenticated. A Credentials' Authenticate method and
// ClientCertificates are Authenticators. Default: no authentication, every
// request may do everything, which suits a gateway on loopback only.
//
// The gateway serves plain HTTP: serve it with TLS (http.Server's
// TLSConfig, or ServeTLS), since a bearer token sent in clear text is
// anybody's who sees it; for client certificates, set the tls.Config's
// ClientAuth to tls.RequireAndVerifyClientCert and its ClientCAs.
func Authenticate(a Authenticator) Option {
	return func(c *config) error {
		if a == nil {
			return fmt.Errorf("%w: nil Authenticator", ErrInvalidOption)
		}
		c.auth = a
		return nil
	}
}

// ClientCertificates returns an Authenticator that accepts a request made
// with a client certificate the TLS server verified (the principal is
// named by the certificate's subject common name or, without one, its
// first DNS, e-mail or URI subject alternative name), with ps for every
// such principal.
func ClientCertificates(ps Permissions) Authenticator {
	return func(r *http.Request) (Principal, error) {
		name, err := certName(r)
		if err != nil {
			return Principal{}, err
		}
		return Principal{Name: name, Permissions: ps}, nil
	}
}

// certName names the principal of the request's verified client
// certificate.
func certName(r *http.Request) (string, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", fmt.Errorf("%w: no bearer token and no verified client certificate", ErrUnauthenticated)
	}
	if name := nameOf(r.TLS.VerifiedChains[0][0]); name != "" {
		return name, nil
	}
	return "", fmt.Errorf("%w: the client certificate names nobody: no subject common name and no subject alternative name", ErrUnauthenticated)
}

func nameOf(c *x509.Certificate) string {
	switch {
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	}
	return ""
}

type principalKey struct{}

// caller is the request's principal as the middleware put it in its
// context; nil when the gateway has no Authenticator.
func caller(r *http.Request) *Principal {
	p, _ := r.Context().Value(principalKey{}).(*Principal)
	return p
}

func withCaller(r *http.Request, p *Principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// allow refuses with 403 unless the request's principal may do action on
// key. Without an Authenticator everything is allowed.
func allow(r *http.Request, action Action, key string) *apiError {
	p := caller(r)
	if p == nil || p.Permissions.Allows(action, key) {
		return nil
	}
	return errorf(http.StatusForbidden, CodeForbidden, "%s may not %s %q: no permission %s:PREFIX covers it", p.Name, action, key, action)
}

// allowPrefix refuses with 403 unless the principal may do action on every
// key under prefix: a list or a watch of it.
func allowPrefix(r *http.Request, action Action, prefix string) *apiError {
	p := caller(r)
	if p == nil {
		return nil
	}
	for _, pm := range p.Permissions {
		if pm.Action == ActionAdmin || (pm.Action == action && strings.HasPrefix(prefix, pm.Prefix)) {
			return nil
		}
	}
	return errorf(http.StatusForbidden, CodeForbidden, "%s may not %s every key under %q: ask for a prefix that one of its permissions %s:PREFIX covers", p.Name, action, prefix, action)
}
