package redisdlock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dlockdev/dlock/driver"
)

var _ driver.Revoker = (*redisDriver)(nil)

// Revoke implements driver.Revoker with one atomic script (revoke.lua):
// the revoked holders' records leave the key (staying as holders until
// their lock-delays, counted from the server's TIME, have passed), the
// waiters the grant rule then admits are granted, and the slot's token
// record is raised above the revoked tokens.
func (d *redisDriver) Revoke(ctx context.Context, key string, token uint64) ([]driver.Entry, error) {
	v, err := revokeScript.run(ctx, d, d.lockKeys(key), strconv.FormatUint(token, 10)).Slice()
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("redis at %s", d.addr), err)
	}
	if len(v) == 1 && v[0] == int64(0) {
		return nil, fmt.Errorf("%w: no holder has fencing token %d", driver.ErrNotHeld, token)
	}
	bad := fmt.Errorf("redis at %s: revoke: unexpected reply of %d items", d.addr, len(v))
	if len(v) < 3 || v[0] != int64(1) {
		return nil, bad
	}
	if nh, _ := v[2].(int64); int64(len(v)) != 3+holderItems*nh {
		return nil, bad
	}
	s, _ := v[1].(string)
	now, _ := strconv.ParseInt(s, 10, 64)
	holders, _ := parseHolders(v[3:], now)
	return holders, nil
}
