package redisdlock

import (
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// Ref implements driver.Referrer: a Redis grant is all on the server (the
// owner's record, with its deadline, in the lock's hash), so the request's
// key and owner and the token name it; no more is needed.
func (g *grant) Ref() ([]byte, bool) { return nil, true }

// Reattach implements driver.Reattacher: the grant's Renew and Release
// send renew.lua and release.lua, which act only while ref.Owner holds
// the key, with the arguments the acquiring process would send.
func (d *redisDriver) Reattach(ref driver.GrantRef) (driver.Grant, error) {
	if len(ref.Data) != 0 {
		return nil, fmt.Errorf("redisdlock: reattach: unexpected backend data in the grant reference")
	}
	if ref.TTL <= 0 || ref.Token == 0 || ref.Owner == "" {
		return nil, fmt.Errorf("redisdlock: reattach: incomplete grant reference")
	}
	return &grant{
		d:         d,
		keys:      d.lockKeys(ref.Key),
		owner:     newOwnerArg(ref.Owner),
		ttl:       ref.TTL,
		ttlMs:     ms(ref.TTL),
		token:     ref.Token,
		validFrom: time.Now(),
	}, nil
}
