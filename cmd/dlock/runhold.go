package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/dlockdev/dlock"
)

// waitHold waits, after PROGRAM has exited, for the end of the lease's
// minimum hold (--hold-at-least): the Client renews the lease meanwhile and
// releases it when the hold ends, so that a run fired a little later on
// another machine finds the key held and skips (--no-wait). dlock stays
// idle until then and keeps PROGRAM's exit status.
//
// A signal (the service manager stopping dlock) ends the wait at once and
// leaves the lease to expire: Client.Close does not release a lease in its
// minimum hold but stops renewing it, so the server frees the key within
// the TTL, as when dlock is killed.
func (c *cli) waitHold(lease *dlock.Lease, sigs <-chan os.Signal, verbose bool) {
	if verbose {
		fmt.Fprintf(c.stderr, "dlock: holding %q for the rest of its minimum hold (--hold-at-least)\n", lease.Key())
	}
	select {
	case <-lease.Done():
		if err := lease.Err(); !errors.Is(err, dlock.ErrReleased) {
			// PROGRAM had finished: nobody else could run it while it
			// did; only the rest of the hold is cut short.
			c.warnf("lost %q during its minimum hold after %s exited: %v", lease.Key(), "PROGRAM", err)
			return
		}
		if verbose {
			fmt.Fprintf(c.stderr, "dlock: released %q\n", lease.Key())
		}
	case s := <-sigs:
		fmt.Fprintf(c.stderr, "dlock: %s during the minimum hold of %q: not releasing it; the server frees it when its TTL (%v) runs out\n", signalName(s), lease.Key(), lease.TTL())
	}
}
