package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
)

// A lease id is "l_" + base64url(payload) + "." + base64url(mac): the
// payload a leaseRef in JSON, the mac its HMAC-SHA256 under the gateway's
// lease key (LeaseKey), cut to 128 bits. The mac makes the id a
// capability nobody can forge or alter: a renewal by reference could
// otherwise be sent for another owner, token or TTL than the grant's.
const macLen = 16

// leaseRef is what a lease id says. A sticky lease (held by the instance
// that granted it: the backend's grant lives in its connection, or an
// election's term in its process) has Nonce, its key in that instance's
// table; a portable one has what a driver.GrantRef needs to renew and
// release it from any instance in front of the same backend.
type leaseRef struct {
	Instance string `json:"i"`
	// KeyID names the lease key that signed the id (keyID), so that an
	// instance with the same key knows that a mac that does not match is
	// a forgery, not another key's.
	KeyID []byte `json:"ki"`
	Nonce string `json:"n,omitempty"`

	Key   string     `json:"k,omitempty"`
	Owner string     `json:"o,omitempty"`
	Token uint64     `json:"t,omitempty"`
	TTLMs int64      `json:"ttl,omitempty"`
	Kind  dlock.Kind `json:"kd,omitempty"`
	Limit int        `json:"lim,omitempty"`
	Mode  dlock.Mode `json:"m,omitempty"`
	Data  []byte     `json:"d,omitempty"`
}

func (p *leaseRef) portable() bool { return p.Nonce == "" }

func (p *leaseRef) grantRef() driver.GrantRef {
	return driver.GrantRef{Key: p.Key, Owner: p.Owner, TTL: time.Duration(p.TTLMs) * time.Millisecond, Kind: p.Kind, Limit: p.Limit, Mode: p.Mode, Token: p.Token, Data: p.Data}
}

func portableRef(instance string, r driver.GrantRef) *leaseRef {
	return &leaseRef{Instance: instance, Key: r.Key, Owner: r.Owner, Token: r.Token, TTLMs: r.TTL.Milliseconds(), Kind: r.Kind, Limit: r.Limit, Mode: r.Mode, Data: r.Data}
}

// newLeaseKey returns a random lease key: without LeaseKey, an instance
// accepts only the lease ids it issued.
func newLeaseKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails: crypto/rand crashes the program instead
	return k
}

// keyID returns the name of a lease key: 64 bits of an HMAC under it,
// which tell nothing of the key.
func keyID(key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("dlock gateway lease key id"))
	return m.Sum(nil)[:8]
}

func (g *Gateway) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, g.cfg.leaseKey)
	m.Write(payload)
	return m.Sum(nil)[:macLen]
}

// leaseID returns the id of p, signed with the gateway's lease key.
func (g *Gateway) leaseID(p *leaseRef) string {
	p.KeyID = g.keyID
	payload, err := json.Marshal(p)
	if err != nil {
		panic(err) // a leaseRef always marshals
	}
	enc := base64.RawURLEncoding
	return "l_" + enc.EncodeToString(payload) + "." + enc.EncodeToString(g.mac(payload))
}

// parseLeaseID checks id and returns what it says. A malformed id is
// invalid_request; one whose mac does not match is lease_not_found (forged,
// or altered), or wrong_instance when it names another instance and
// another lease key (the instance that granted it shares no key with this
// one); a sticky lease of another instance is wrong_instance too.
func (g *Gateway) parseLeaseID(id string) (*leaseRef, *apiError) {
	malformed := func() (*leaseRef, *apiError) {
		return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "lease id %q is malformed: want the lease_id of an acquire's reply", id)
	}
	body, ok := strings.CutPrefix(id, "l_")
	if !ok {
		return malformed()
	}
	p64, m64, ok := strings.Cut(body, ".")
	if !ok {
		return malformed()
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p64)
	mac, err2 := enc.DecodeString(m64)
	var p leaseRef
	if err1 != nil || err2 != nil || len(mac) != macLen || json.Unmarshal(payload, &p) != nil || p.Instance == "" {
		return malformed()
	}
	switch {
	case !hmac.Equal(mac, g.mac(payload)) && p.Instance != g.instance && !hmac.Equal(p.KeyID, g.keyID):
		return nil, errorf(http.StatusMisdirectedRequest, CodeWrongInstance, "lease %s was granted by gateway instance %s, which shares no lease key with this one (%s): send its requests there", id, p.Instance, g.instance)
	case !hmac.Equal(mac, g.mac(payload)):
		return nil, errorf(http.StatusNotFound, CodeLeaseNotFound, "no lease %s: this gateway never issued the id", id)
	case !p.portable() && p.Instance != g.instance:
		return nil, errorf(http.StatusMisdirectedRequest, CodeWrongInstance, "lease %s is held by gateway instance %s (this is %s): on this backend a lease lives in the instance that granted it; send its requests there", id, p.Instance, g.instance)
	}
	return &p, nil
}
