package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dlockdev/dlock"
)

// clearScreen moves the cursor home and clears the terminal (ANSI), so that
// each state of status --watch replaces the one before.
const clearScreen = "\x1b[H\x1b[2J"

// watchStatus prints key's status, then again after every change, until
// ctx ends (SIGINT, SIGTERM, SIGHUP): then it exits 0. On a terminal each
// state replaces the screen; elsewhere (a pipe, a file) the states follow
// each other, a blank line apart, or with asJSON one object per line.
func (c *cli) watchStatus(ctx context.Context, client *dlock.Client, key string, asJSON bool) int {
	enc := json.NewEncoder(c.stdout) // one object per line
	redraw := isTerminal(c.stdout)
	first := true
	for info := range client.Watch(ctx, key) {
		info = normalize(info)
		now := time.Now()
		if asJSON {
			if err := enc.Encode(toJSON(info, now)); err != nil {
				return exitFailure // stdout closed (the reader of a pipe left): nothing to report to
			}
			continue
		}
		sep := "\n"
		switch {
		case redraw:
			sep = clearScreen
		case first:
			sep = ""
		}
		first = false
		if _, err := io.WriteString(c.stdout, sep); err != nil {
			return exitFailure
		}
		writeStatus(c.stdout, info, now)
	}
	if ctx.Err() != nil {
		return exitOK
	}
	// Watch closes its channel at once, with ctx still alive, when the
	// driver cannot watch: the key's validity was checked by the caller.
	return c.fail(exitFailure, fmt.Errorf("cannot watch %q: %w", key, errors.ErrUnsupported),
		"this backend sends no change notices; run `dlock status "+key+"` without --watch to read the key once")
}

// isTerminal reports whether w is a terminal (a character device, as
// /dev/null is too, where clearing the screen does no harm).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
