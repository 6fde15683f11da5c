package redisdlock

import (
	"context"

	"github.com/dlockdev/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// RedisKeyForTest returns the Redis key of a lock's hash.
func RedisKeyForTest(prefix, key string) string {
	return prefix + "{" + escapeKey(key) + "}"
}

// AcquireScriptHashForTest is the SHA1 that EVALSHA sends for acquire.lua.
func AcquireScriptHashForTest() string { return acquireScript.Hash() }

// ReleaseScriptHashForTest is the SHA1 that EVALSHA sends for release.lua.
func ReleaseScriptHashForTest() string { return releaseScript.Hash() }

// RenewScriptHashForTest is the SHA1 that EVALSHA sends for renew.lua.
func RenewScriptHashForTest() string { return renewScript.Hash() }

// LockKeysForTest returns the Redis keys the scripts take for a lock, as
// names: its hash, queue, waiters and old fence, then its slot's token
// record and release trace.
func LockKeysForTest(prefix, key string) []string {
	return buildLockKeys(prefix, key).names[:]
}

// NewDriverForTest returns the driver that New wraps in a dlock.Client, for
// tests of its methods that the Client does not call directly.
func NewDriverForTest(ctx context.Context, rdb redis.UniversalClient, opts *Options) (interface {
	driver.Driver
	driver.BatchRenewer
}, error) {
	return newDriver(ctx, rdb, opts, false, clientAddr(rdb))
}

// EarlyNoticeForTest reports whether d's notifier keeps a notice for owner
// that came before owner's waiter registered.
func EarlyNoticeForTest(d driver.Driver, owner string) bool {
	n := d.(*redisDriver).notify
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.early {
		if e.owner == newOwnerArg(owner) {
			return true
		}
	}
	return false
}

// PipeFlightsForTest is how many calls a Client keeps on the wire before
// it queues more.
const PipeFlightsForTest = defaultMaxFlights

// PipeStateForTest returns how many requests or pipelines d has on the
// wire, how many calls wait in its queue, and how many calls are in its
// pipelines on the wire.
func PipeStateForTest(d driver.Driver) (flights, queued, onWire int) {
	p := d.(*redisDriver).pipe
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next != nil {
		queued = len(p.next.calls)
	}
	return p.flights, queued, p.onWire
}

// SendPipeQueueForTest sends d's queued calls as one pipeline now, as when
// a flight comes back.
func SendPipeQueueForTest(d driver.Driver) {
	p := d.(*redisDriver).pipe
	p.mu.Lock()
	p.flights++
	p.mu.Unlock()
	p.land()
}

// PipeLeftForTest returns how many keys' releases d holds back behind an
// acquire that left its pipeline on the wire.
func PipeLeftForTest(d driver.Driver) int {
	p := d.(*redisDriver).pipe
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.left)
}
