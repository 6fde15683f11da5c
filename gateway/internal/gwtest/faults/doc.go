// Package faults tests the lock gateway's safety under faults against real
// servers: a gateway process killed with SIGKILL while it holds a lease,
// and clients contending through two gateways on one backend with a
// checker of the grants' intervals and tokens. Its own test binary, apart
// from package gwtest's: it kills processes and runs long contention, and
// shares no test hook with the gateway's other tests.
package faults
