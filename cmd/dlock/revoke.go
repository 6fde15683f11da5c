package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockdev/dlock"
)

// cmdRevoke ends the grants of a key on the server: an operator's way to
// remove a holder stuck in a live process (Client.Revoke).
func (c *cli) cmdRevoke(ctx context.Context, args []string) int {
	f := newFlags("revoke")
	backend := addBackendFlags(f)
	holder := f.Uint64("holder", 0, "")
	asJSON := f.Bool("json", false, "")
	pos, code, ok := c.parse(f, args, 1)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return c.usageError("revoke", "missing KEY")
	}
	key := pos[0]
	var opts []dlock.RevokeOption
	if f.isSet("holder") {
		if *holder == 0 {
			return c.usageError("revoke", "%s 0: fencing tokens start at 1; `dlock status %s` shows the holders' tokens", f.source("holder"), key)
		}
		opts = append(opts, dlock.RevokeToken(*holder))
	}
	client, code, ok := c.open(ctx, backend)
	if !ok {
		return code
	}
	defer client.Close()
	revoked, err := client.Revoke(ctx, key, opts...)
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		return c.fail(exitFailure, err, "`dlock status "+key+"` shows the holders and their tokens; nothing was revoked")
	case err != nil:
		code, hints := c.explain(err, *backend.url)
		return c.fail(code, err, hints...)
	}
	if *asJSON {
		out := make([]jsonEntry, 0, len(revoked))
		for _, e := range revoked {
			out = append(out, toJSONEntry(e))
		}
		return c.writeJSON(out)
	}
	if len(revoked) == 0 {
		fmt.Fprintf(c.stdout, "%s: nobody holds it: nothing to revoke\n", key)
		return exitOK
	}
	for _, e := range revoked {
		line := fmt.Sprintf("revoked %s's holder %s (token %d)", key, who(e.Metadata), e.Token)
		if e.Metadata.Note != "" {
			line += " running " + strconv.Quote(e.Metadata.Note)
		}
		if e.LockDelay > 0 {
			line += fmt.Sprintf("; its lock-delay of %s keeps %s from the others until %s", fmtDuration(e.LockDelay), key, time.Now().Add(e.LockDelay).Local().Format("15:04:05"))
		}
		fmt.Fprintln(c.stdout, line)
	}
	return exitOK
}
