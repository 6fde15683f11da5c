package memdlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlockdev/dlock/driver"
)

// errRevoked is why a revoked holder's lease ended.
var errRevoked = errors.New("revoked")

// Revoke ends the grants of key: every holder's when token is 0, else the
// holder's with that token. A revoked holder's lease hears of it at once
// (Lost); with a lock-delay its entry keeps its place until the delay,
// counted from now by the space's clock, is over.
func (c *conn) Revoke(ctx context.Context, key string, token uint64) ([]driver.Entry, error) {
	if err := c.call(ctx); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	k := s.keys[key]
	var victims []*entry
	if k != nil {
		for _, e := range k.q {
			if e.granted && !e.ended && (token == 0 || e.token == token) {
				victims = append(victims, e)
			}
		}
	}
	if token != 0 && len(victims) == 0 {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: no holder has fencing token %d", driver.ErrNotHeld, token)
	}
	var revoked []driver.Entry
	if len(victims) > 0 {
		// As Inspect shows them, before they end.
		info := s.info(key)
		for _, h := range info.Holders {
			for _, v := range victims {
				if v.token == h.Token {
					revoked = append(revoked, h)
				}
			}
		}
	}
	free := false
	now := s.now()
	for _, e := range victims {
		free = s.drop(k, e, errRevoked, now) || free
	}
	s.mu.Unlock()
	if free {
		s.forgetIfUnused()
	}
	return revoked, nil
}
