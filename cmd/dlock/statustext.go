package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlockdev/dlock"
)

// How status, ls and run's messages show a key for people. Every kind
// shares one layout: a lock is the case of one holder, exclusive; a
// semaphore's holders each hold a permit (shared); a read-write lock has
// one exclusive holder or any number of shared ones. docs/cli.md shows
// examples of each.

// normalize fills in what a backend may leave out: a lock's limit is 1.
func normalize(in *dlock.LockInfo) *dlock.LockInfo {
	if in.Kind == dlock.KindLock && in.Limit == 0 {
		out := *in
		out.Limit = 1
		return &out
	}
	return in
}

// kindName names a key's kind for people: "lock", "semaphore of 3
// permits", "read-write lock".
func kindName(k dlock.Kind, limit int) string {
	switch k {
	case dlock.KindLock:
		return "lock"
	case dlock.KindSemaphore:
		return "semaphore of " + plural(limit, "permit")
	case dlock.KindRWMutex:
		return "read-write lock"
	case dlock.KindElection:
		return "leader election"
	}
	return k.String()
}

// kindLabel is the short form of ls's KIND column and of --json's kind
// with limit: "lock", "semaphore/3", "rwmutex".
func kindLabel(k dlock.Kind, limit int) string {
	if k == dlock.KindSemaphore {
		return "semaphore/" + strconv.Itoa(limit)
	}
	return k.String()
}

// heldSummary says who holds in, for status's first line: "held by
// build-7 pid 42" (a lock), "2 of 3 permits held", "held for reading by 3",
// "held for writing by build-7 pid 42", or "free".
func heldSummary(in *dlock.LockInfo) string {
	n := len(in.Holders)
	switch {
	case in.Kind == dlock.KindSemaphore:
		return fmt.Sprintf("%d of %d held", n, in.Limit)
	case n == 0:
		return "free"
	case in.Kind == dlock.KindRWMutex && in.Holders[0].Mode == dlock.Shared && n > 1:
		return fmt.Sprintf("held for reading by %d", n)
	case in.Kind == dlock.KindRWMutex && in.Holders[0].Mode == dlock.Shared:
		return "held for reading by " + who(in.Holders[0].Metadata)
	case in.Kind == dlock.KindRWMutex:
		return "held for writing by " + who(in.Holders[0].Metadata)
	case n > 1: // a lock never has two holders; say so if a backend shows it
		return fmt.Sprintf("held by %d", n)
	}
	return "held by " + who(in.Holders[0].Metadata)
}

// waitSummary: "nobody waiting", "2 waiting".
func waitSummary(in *dlock.LockInfo) string {
	if len(in.Waiters) == 0 {
		return "nobody waiting"
	}
	return fmt.Sprintf("%d waiting", len(in.Waiters))
}

// writeStatus prints one key's kind, holders and waiters for people.
func writeStatus(w io.Writer, in *dlock.LockInfo, now time.Time) {
	if len(in.Holders) == 0 && len(in.Waiters) == 0 {
		// Nobody holds or waits: the key has no kind on the server.
		fmt.Fprintf(w, "%s: free (nobody holds it or waits for it)\n", in.Key)
		return
	}
	fmt.Fprintf(w, "%s (%s): %s, %s\n", in.Key, kindName(in.Kind, in.Limit), heldSummary(in), waitSummary(in))
	if !in.DelayedUntil.IsZero() {
		fmt.Fprintf(w, "lock-delay in force: granted to nobody until %s (%s left), after a holder's lease ended without release\n",
			in.DelayedUntil.Local().Format("15:04:05"), fmtDuration(max(in.DelayedUntil.Sub(now), 0)))
	}
	fmt.Fprintln(w)
	// The LOCK-DELAY column only where some entry has one: the table
	// stays as it was for everyone else.
	delays := false
	for _, e := range append(in.Holders[:len(in.Holders):len(in.Holders)], in.Waiters...) {
		delays = delays || e.LockDelay > 0
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if delays {
		fmt.Fprintln(tw, "ROLE\tMODE\tHOST\tPID\tTOKEN\tSINCE\tTTL LEFT\tLOCK-DELAY\tNOTE")
	} else {
		fmt.Fprintln(tw, "ROLE\tMODE\tHOST\tPID\tTOKEN\tSINCE\tTTL LEFT\tNOTE")
	}
	row := func(role string, e dlock.Entry, token string) {
		pid := "-"
		if e.Metadata.PID != 0 {
			pid = strconv.Itoa(e.Metadata.PID)
		}
		if delays {
			delay := "-"
			if e.LockDelay > 0 {
				delay = fmtDuration(e.LockDelay)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", role, e.Mode, orDash(e.Metadata.Host), pid, token, fmtSince(e.Since, now), fmtTTL(e.TTL), delay, e.Metadata.Note)
			return
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", role, e.Mode, orDash(e.Metadata.Host), pid, token, fmtSince(e.Since, now), fmtTTL(e.TTL), e.Metadata.Note)
	}
	for _, h := range in.Holders {
		row("holder", h, strconv.FormatUint(h.Token, 10))
	}
	for i, e := range in.Waiters {
		row("waiter "+strconv.Itoa(i+1), e, "-")
	}
	_ = tw.Flush()
}

// writeList prints ls's table: one line per key, with the holder granted
// first (the only one, for a lock) and how many more there are.
func writeList(w io.Writer, infos []*dlock.LockInfo, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tKIND\tHOLDERS\tWAITERS\tHOLDER\tTOKEN\tHELD SINCE\tTTL LEFT\tNOTE")
	for _, in := range infos {
		holder, token, since, ttl, note := "-", "-", "-", "-", ""
		if len(in.Holders) > 0 {
			h := in.Holders[0]
			holder = who(h.Metadata)
			if more := len(in.Holders) - 1; more > 0 {
				holder += " and " + strconv.Itoa(more) + " more"
			}
			token = strconv.FormatUint(h.Token, 10)
			since = fmtSince(h.Since, now)
			ttl = fmtTTL(h.TTL)
			note = h.Metadata.Note
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", in.Key, kindLabel(in.Kind, in.Limit), holdersCount(in), len(in.Waiters), holder, token, since, ttl, note)
	}
	_ = tw.Flush()
}

// holdersCount is ls's HOLDERS column: how many hold the key, and for a
// read-write lock in which mode ("3 shared", "1 exclusive"); a lock's and
// a semaphore's mode goes without saying.
func holdersCount(in *dlock.LockInfo) string {
	n := strconv.Itoa(len(in.Holders))
	if in.Kind == dlock.KindRWMutex && len(in.Holders) > 0 {
		return n + " " + in.Holders[0].Mode.String()
	}
	return n
}

// maxNamed bounds how many holders an error message names.
const maxNamed = 3

// describeHolders says who holds in and how many wait, for run's
// messages. A lock: `held by build-7 pid 42 running "make" for 3s (token
// 5), 2 waiting`. Several holders are named with their tokens, at most
// maxNamed of them: `2 of 2 permits held, by build-7 pid 42 running "a"
// (token 5) and build-9 pid 7 running "b" (token 6)`. For a read-write
// lock it says whether the holders read or write and what the first waiter
// waits for. "" when nobody holds the key.
func describeHolders(in *dlock.LockInfo, now time.Time) string {
	if len(in.Holders) == 0 {
		return ""
	}
	entry := func(e dlock.Entry, withSince bool) string {
		s := who(e.Metadata)
		if e.Metadata.Note != "" {
			s += " running " + strconv.Quote(e.Metadata.Note)
		}
		if withSince && !e.Since.IsZero() {
			s += " for " + fmtDuration(now.Sub(e.Since))
		}
		return s + fmt.Sprintf(" (token %d)", e.Token)
	}
	var named []string
	for i, h := range in.Holders {
		if i == maxNamed {
			named = append(named, fmt.Sprintf("%d more", len(in.Holders)-maxNamed))
			break
		}
		named = append(named, entry(h, len(in.Holders) == 1))
	}
	list := strings.Join(named, ", ")
	if len(named) > 1 {
		list = strings.Join(named[:len(named)-1], ", ") + " and " + named[len(named)-1]
	}
	var s string
	switch {
	case in.Kind == dlock.KindSemaphore:
		if in.Limit == 1 {
			s = "its permit is held by " + list
		} else {
			s = fmt.Sprintf("%d of %d permits held, by %s", len(in.Holders), in.Limit, list)
		}
	case in.Kind == dlock.KindRWMutex && in.Holders[0].Mode == dlock.Shared:
		s = "held for reading by " + list
	case in.Kind == dlock.KindRWMutex:
		s = "held for writing by " + list
	default:
		s = "held by " + list
	}
	if n := len(in.Waiters); n > 0 {
		s += fmt.Sprintf(", %d waiting", n)
		if in.Kind == dlock.KindRWMutex {
			s += " (the first to " + readOrWrite(in.Waiters[0].Mode) + ")"
		}
	}
	return s
}

// readOrWrite is what an entry of mode m of a read-write lock does.
func readOrWrite(m dlock.Mode) string {
	if m == dlock.Shared {
		return "read"
	}
	return "write"
}
