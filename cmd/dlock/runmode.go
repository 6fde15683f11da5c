package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockdev/dlock"
)

// runShape is what `dlock run` takes of KEY: the lock (no flag), one of
// the permits of a semaphore (--limit N), or the read (--shared) or write
// (--exclusive) lease of a read-write lock. All four share `run`'s code
// from the lease on: only acquiring and the wording differ.
type runShape struct {
	kind  dlock.Kind
	limit int // a semaphore's permits; unused for the others
	mode  dlock.Mode
}

var lockShape = runShape{kind: dlock.KindLock, limit: 1, mode: dlock.Exclusive}

// acquire takes the shape's lease of key: waiting for it, or (noWait) only
// if it is granted at once.
func (s runShape) acquire(ctx context.Context, client *dlock.Client, key string, noWait bool, opts ...dlock.LockOption) (*dlock.Lease, error) {
	switch {
	case s.kind == dlock.KindSemaphore && noWait:
		return client.Semaphore(key, s.limit).TryAcquire(ctx, opts...)
	case s.kind == dlock.KindSemaphore:
		return client.Semaphore(key, s.limit).Acquire(ctx, opts...)
	case s.kind == dlock.KindRWMutex && s.mode == dlock.Shared && noWait:
		return client.RWMutex(key).TryRLock(ctx, opts...)
	case s.kind == dlock.KindRWMutex && s.mode == dlock.Shared:
		return client.RWMutex(key).RLock(ctx, opts...)
	case s.kind == dlock.KindRWMutex && noWait:
		return client.RWMutex(key).TryLock(ctx, opts...)
	case s.kind == dlock.KindRWMutex:
		return client.RWMutex(key).Lock(ctx, opts...)
	case noWait:
		return client.TryLock(ctx, key, opts...)
	}
	return client.Lock(ctx, key, opts...)
}

// lease names what the shape holds, for messages: "the lock", "the
// permit", "the read lease", "the write lease".
func (s runShape) lease() string {
	switch {
	case s.kind == dlock.KindSemaphore:
		return "the permit"
	case s.kind == dlock.KindRWMutex && s.mode == dlock.Shared:
		return "the read lease"
	case s.kind == dlock.KindRWMutex:
		return "the write lease"
	case s.kind == dlock.KindElection:
		return "the leadership"
	}
	return "the lock"
}

// acquired is how -v reports the grant: `acquired "k"` for a lock, as
// before the other kinds existed; `acquired one of 3 permits of "k"` (`the permit` of a semaphore of 1),
// `acquired a read lease of "k"`, `acquired the write lease of "k"`.
func (s runShape) acquired(key string) string {
	switch {
	case s.kind == dlock.KindSemaphore && s.limit == 1:
		return fmt.Sprintf("the permit of %q", key)
	case s.kind == dlock.KindSemaphore:
		return fmt.Sprintf("one of %d permits of %q", s.limit, key)
	case s.kind == dlock.KindRWMutex && s.mode == dlock.Shared:
		return "a read lease of " + strconv.Quote(key)
	case s.kind == dlock.KindRWMutex:
		return "the write lease of " + strconv.Quote(key)
	}
	return strconv.Quote(key)
}

// kindFlags are the flags of `dlock run` that take a key of kind k with
// limit: what a hint tells a user whose flags do not match the key.
func kindFlags(k dlock.Kind, limit int) string {
	switch k {
	case dlock.KindSemaphore:
		return "--limit " + strconv.Itoa(limit)
	case dlock.KindRWMutex:
		return "--shared (to read) or --exclusive (to write)"
	case dlock.KindElection:
		return "dlock elect instead of dlock run"
	}
	return "none of --limit, --shared and --exclusive"
}

// childMode is the value of DLOCK_MODE in PROGRAM's environment:
// "exclusive" for a lock and a writer, "shared" for a permit and a reader.
//
// DLOCK_KEY, DLOCK_TOKEN and DLOCK_MODE must not be the variable of any
// flag (envName): a dlock that PROGRAM runs would read them as its own
// flags (TestChildVariablesAreNoFlags).
func (s runShape) childMode() string { return s.mode.String() }

// The variables dlock run gives PROGRAM: the key, the lease's fencing
// token, and childMode.
const (
	envKey   = "DLOCK_KEY"
	envToken = "DLOCK_TOKEN"
	envMode  = "DLOCK_MODE"
)

var childVariables = []string{envKey, envToken, envMode}

// parseShape reads --limit, --shared and --exclusive. It returns ok=false
// with the exit status on a usage error.
func (c *cli) parseShape(f *flags, limit *int, shared, exclusive *bool) (runShape, int, bool) {
	limitSet := f.isSet("limit")
	sharedSet := f.isSet("shared") && *shared
	exclusiveSet := f.isSet("exclusive") && *exclusive
	// Each pair contradicts itself; where one of the two comes from the
	// environment and the other from the command line, the command line
	// wins, as for --wait and --no-wait.
	for _, p := range []struct {
		a, b       string
		aSet, bSet *bool
		why        string
	}{
		{"limit", "shared", &limitSet, &sharedSet, "--limit takes a permit of a semaphore, --shared a read lease of a read-write lock"},
		{"limit", "exclusive", &limitSet, &exclusiveSet, "--limit takes a permit of a semaphore, --exclusive the write lease of a read-write lock"},
		{"shared", "exclusive", &sharedSet, &exclusiveSet, "a read-write lock's lease is either shared (to read) or exclusive (to write)"},
	} {
		if !*p.aSet || !*p.bSet {
			continue
		}
		drop, err := f.commandLineWins(p.a, p.b)
		switch {
		case err != nil:
			return runShape{}, c.usageError("run", "%v: %s", err, p.why), false
		case drop == p.a:
			*p.aSet = false
		default:
			*p.bSet = false
		}
	}
	switch {
	case limitSet && *limit < 1:
		return runShape{}, c.usageError("run", "%s %d: a semaphore has at least 1 permit", f.source("limit"), *limit), false
	case limitSet:
		return runShape{kind: dlock.KindSemaphore, limit: *limit, mode: dlock.Shared}, exitOK, true
	case sharedSet:
		return runShape{kind: dlock.KindRWMutex, mode: dlock.Shared}, exitOK, true
	case exclusiveSet:
		return runShape{kind: dlock.KindRWMutex, mode: dlock.Exclusive}, exitOK, true
	}
	return lockShape, exitOK, true
}

// commandLineWins settles two flags that contradict each other, both set:
// if exactly one came from its environment variable, it returns that
// one's name, to be ignored; if both came from the command line, or both
// from the environment, an error naming them.
func (f *flags) commandLineWins(a, b string) (drop string, err error) {
	_, aEnv := f.fromEnv[a]
	_, bEnv := f.fromEnv[b]
	switch {
	case aEnv && !bEnv:
		return a, nil
	case bEnv && !aEnv:
		return b, nil
	}
	return "", fmt.Errorf("%s and %s contradict each other", f.source(a), f.source(b))
}

// lockedText begins the error of --no-wait when the key is not granted at
// once: `"k" is locked`, `"k" has no free permit`, `"k" is not free to
// read` (a writer holds it or waits for it), `"k" is not free to write`.
func lockedText(key string, s runShape) string {
	switch {
	case s.kind == dlock.KindSemaphore:
		return strconv.Quote(key) + " has no free permit"
	case s.kind == dlock.KindRWMutex:
		return strconv.Quote(key) + " is not free to " + readOrWrite(s.mode)
	}
	return strconv.Quote(key) + " is locked"
}

// kindHint follows ErrKindMismatch, whose message names what the key is:
// the flags that take it as what it is, read from the key's current
// state (which may have changed since: then a general hint).
func (c *cli) kindHint(client *dlock.Client, key string, s runShape) string {
	status := "`dlock status " + key + "` shows who holds it and how"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	in, err := client.Inspect(ctx, key)
	if err != nil || len(in.Holders)+len(in.Waiters) == 0 || in.Kind == s.kind && (in.Kind != dlock.KindSemaphore || in.Limit == s.limit) {
		return "a key serves one kind (lock, semaphore of a given limit, read-write lock) while anybody holds or waits for it; " + status
	}
	return fmt.Sprintf("its holders and waiters use it as a %s: take it with %s, or use another key; %s", kindName(in.Kind, in.Limit), kindFlags(in.Kind, in.Limit), status)
}

// plural: "1 permit", "3 permits".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
