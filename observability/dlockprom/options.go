package dlockprom

import "strings"

// Option configures New.
type Option func(*config)

type config struct {
	keyLabel func(key string) string
	noLeader bool
}

// WithKeyLabel adds a key label to every dlock_ metric, whose value is
// label(key). label must map the keys to a small, bounded set of values
// (a job's family, a tenant's tier), never to the keys themselves when
// those are made of names or IDs: each value is a set of series that
// Prometheus keeps. KeyPrefix is such a mapping for keys of the form
// "group/...". label is called on the goroutine of each event, and must
// be quick and safe for concurrent use.
func WithKeyLabel(label func(key string) string) Option {
	return func(c *config) { c.keyLabel = label }
}

// WithoutLeaderStatus leaves out leader_election_master_status, for a
// process whose client-go leader election reports that metric already, or
// that campaigns in elections of unbounded names.
func WithoutLeaderStatus() Option {
	return func(c *config) { c.noLeader = true }
}

// KeyPrefix returns a mapping for WithKeyLabel: the part of a key before the
// first sep ("reports" for "reports/daily/2026-12-06" with sep "/"), or the
// whole key when it has no sep, as a fixed name like "nightly-backup" has.
func KeyPrefix(sep string) func(key string) string {
	return func(key string) string {
		prefix, _, _ := strings.Cut(key, sep)
		return prefix
	}
}
