package gateway

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
)

// MinTokenLen is the shortest bearer token a credentials file may hold:
// 16 characters of a random token are beyond guessing, and a shorter one
// is likely a password somebody chose.
const MinTokenLen = 16

// Credentials are the principals of a credentials file, each with a
// bearer token or a client certificate, and its permissions. Its
// Authenticate method is an Authenticator. It is safe for concurrent use.
//
// The file has one principal a line, its fields separated by spaces:
//
//	# TOKEN NAME PERMISSION...
//	4f9a0c1e8b7d2a63c5e1f0b9d8a7c6e5 orders-service lock:orders/ read:orders/
//	9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e dashboard read:
//	- worker-7.example.com lock:jobs/
//
// A line starting with # is a comment. A TOKEN of - gives the permissions
// to the client certificate named NAME (see ClientCertificates) rather
// than to a bearer token. A PERMISSION is lock:PREFIX, read:PREFIX or
// admin (see ParsePermission). Like ssh with a private key, the file is
// refused when others than its owner may read or write it.
type Credentials struct {
	path string

	mu     sync.RWMutex
	tokens []tokenEntry         // guarded by mu
	certs  map[string]Principal // by certificate name; guarded by mu
}

type tokenEntry struct {
	sum       [sha256.Size]byte // of the token: compared in constant time
	principal Principal
}

// LoadCredentials reads the credentials file at path. It returns an error
// satisfying errors.Is(err, ErrCredentials) for a file that others may
// read or write, or with a line that is not a principal.
func LoadCredentials(path string) (*Credentials, error) {
	c := &Credentials{path: path}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the file again and, if it is usable, replaces the
// principals with its own; otherwise it keeps them and returns the error
// (errors.Is(err, ErrCredentials) for the file's content or mode).
func (c *Credentials) Reload() error {
	f, err := os.Open(c.path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("%w: %s: mode %04o lets others than its owner read or change the tokens: chmod 600 it", ErrCredentials, c.path, m)
	}
	tokens, certs, err := parseCredentials(f)
	if err != nil {
		return fmt.Errorf("%w: %s:%v", ErrCredentials, c.path, err)
	}
	c.mu.Lock()
	c.tokens, c.certs = tokens, certs
	c.mu.Unlock()
	return nil
}

func parseCredentials(r io.Reader) ([]tokenEntry, map[string]Principal, error) {
	var tokens []tokenEntry
	certs := make(map[string]Principal)
	names := make(map[string]int)
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		// The messages name the line, never the token.
		if len(fields) < 3 {
			return nil, nil, fmt.Errorf("%d: want TOKEN NAME PERMISSION..., with at least one permission", n)
		}
		token, name := fields[0], fields[1]
		if prev, ok := names[name]; ok {
			return nil, nil, fmt.Errorf("%d: principal %q is named on line %d too", n, name, prev)
		}
		names[name] = n
		p := Principal{Name: name}
		for _, f := range fields[2:] {
			perm, err := ParsePermission(f)
			if err != nil {
				return nil, nil, fmt.Errorf("%d: %v", n, err)
			}
			p.Permissions = append(p.Permissions, perm)
		}
		if token == "-" {
			certs[name] = p
			continue
		}
		if len(token) < MinTokenLen {
			return nil, nil, fmt.Errorf("%d: %s's token is shorter than %d characters: use a random one (openssl rand -hex 16)", n, name, MinTokenLen)
		}
		sum := sha256.Sum256([]byte(token))
		for _, t := range tokens {
			if t.sum == sum {
				return nil, nil, fmt.Errorf("%d: %s's token is %s's too", n, name, t.principal.Name)
			}
		}
		tokens = append(tokens, tokenEntry{sum: sum, principal: p})
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf(" %v", err)
	}
	return tokens, certs, nil
}

// Authenticate names the principal of the request's bearer token
// (Authorization: Bearer TOKEN) or, without one, of its verified client
// certificate. It returns an error satisfying
// errors.Is(err, ErrUnauthenticated) when neither is in the file.
func (c *Credentials) Authenticate(r *http.Request) (Principal, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return Principal{}, fmt.Errorf("%w: the Authorization header is not Bearer TOKEN", ErrUnauthenticated)
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
		// Every entry is compared, each in constant time: how long this
		// takes says nothing about how close a guess came.
		found := -1
		for i := range c.tokens {
			if subtle.ConstantTimeCompare(c.tokens[i].sum[:], sum[:]) == 1 {
				found = i
			}
		}
		if found < 0 {
			return Principal{}, fmt.Errorf("%w: unknown bearer token", ErrUnauthenticated)
		}
		return c.tokens[found].principal, nil
	}
	name, err := certName(r)
	if err != nil {
		return Principal{}, err
	}
	p, ok := c.certs[name]
	if !ok {
		return Principal{}, fmt.Errorf("%w: client certificate %q is not in the credentials file", ErrUnauthenticated, name)
	}
	return p, nil
}
