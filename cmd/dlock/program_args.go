package main

import (
	"os"
	"time"

	"github.com/dlockdev/dlock"
)

// The command-line checks and client options that dlock run and dlock elect
// share: both run a PROGRAM under a lease of KEY.

// keyAndProgram splits the positional arguments of cmd into KEY and
// PROGRAM; under says what PROGRAM runs under, for the usage error of a
// missing PROGRAM.
func (c *cli) keyAndProgram(cmd string, pos []string, under string) (key string, program []string, code int, ok bool) {
	switch {
	case len(pos) == 0:
		return "", nil, c.usageError(cmd, "missing KEY and PROGRAM"), false
	case len(pos) == 1:
		return "", nil, c.usageError(cmd, "missing PROGRAM to run "+under+" %q (write it after --)", pos[0]), false
	}
	return pos[0], pos[1:], 0, true
}

// checkTTL reports whether --ttl is set and, if it is, refuses a TTL
// outside [dlock.MinTTL, dlock.MaxTTL].
func (c *cli) checkTTL(cmd string, f *flags, ttl time.Duration) (set bool, code int, ok bool) {
	set = f.isSet("ttl")
	if set && (ttl < dlock.MinTTL || ttl > dlock.MaxTTL) {
		return set, c.usageError(cmd, "%s %v: the TTL must lie within [%v, %v]", f.source("ttl"), ttl, dlock.MinTTL, dlock.MaxTTL), false
	}
	return set, 0, true
}

// checkGrace reports whether --grace is set and, if it is, refuses a grace
// that is not positive or, with --ttl set, not shorter than the TTL. (The
// lease's real TTL is known, and checked, only once it is taken.)
func (c *cli) checkGrace(cmd string, f *flags, grace, ttl time.Duration, ttlSet bool) (set bool, code int, ok bool) {
	set = f.isSet("grace")
	if set && (grace <= 0 || ttlSet && grace >= ttl) {
		return set, c.usageError(cmd, "%s %v: must be positive and shorter than the TTL (%v)", f.source("grace"), grace, ttl), false
	}
	return set, 0, true
}

// programOptions are the client options of a command that runs program:
// its metadata (our PID, the command) and, if --ttl is set, the TTL.
func programOptions(program []string, ttl time.Duration, ttlSet bool) []dlock.Option {
	meta := dlock.Metadata{PID: os.Getpid(), Note: commandNote(program)}
	opts := []dlock.Option{dlock.WithMetadata(meta)}
	if ttlSet {
		opts = append(opts, dlock.WithTTL(ttl))
	}
	return opts
}
