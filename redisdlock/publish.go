package redisdlock

import (
	"context"
	"fmt"

	"github.com/dlockdev/dlock/driver"
)

var _ driver.Publisher = (*grant)(nil)

// Publish implements driver.Publisher (Election's Proclaim) with
// publish.lua: it replaces the metadata of the caller's own holder record,
// checking in the same atomic script that the record is there and live, so
// that it never writes after the grant is lost nor touches another owner's
// record. The deadline stays as it was: publishing is not renewing. Sent
// again after a lost reply, it writes the same bytes and succeeds while the
// grant is held. On an election key the script also tells the observers.
func (g *grant) Publish(ctx context.Context, metadata []byte) error {
	n, err := publishScript.run(ctx, g.d, g.keys[:1], &g.owner, metadata).Int()
	if err != nil {
		return wrapErr(fmt.Sprintf("redis at %s: publish", g.d.addr), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: the key expired or passed to another owner before the publish", errNotHeld)
	}
	return nil
}
