package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ---- server memory per lock, each library on a server of its own ----

// memoryResult is one library's run of the memory section: on a server
// started for it alone, the server's state with no lock (Base), with Locked
// distinct keys held at once (Held), and once they were all released
// (Released).
type memoryResult struct {
	Lib     string
	Backend string
	Keys    int // keys the run set out to hold at once
	Locked  int // keys held at once: each was locked once
	Acquire time.Duration
	Release time.Duration

	Base, Held, Released memSample
	// MemWhat says what Bytes measures; KeysWhat what Keys counts.
	MemWhat, KeysWhat string

	Missing string // why the library did not run (empty when it did)
	Err     string
}

// memSample is a server's state at one point of a memory run.
type memSample struct {
	// Bytes is the server's memory in use, as memoryResult.MemWhat says.
	Bytes int64
	// UsedMemory is Redis' used_memory, client buffers included (Redis
	// only; Bytes leaves the buffers out).
	UsedMemory int64 `json:",omitempty"`
	// Keys counts what the server stores, as memoryResult.KeysWhat says.
	Keys int64
}

// perLocked divides the growth from Base to x by the keys locked: NaN when
// none was.
func (r memoryResult) perLocked(x, base int64) float64 {
	if r.Locked == 0 {
		return math.NaN()
	}
	return float64(x-base) / float64(r.Locked)
}

// heldBytesPerLock is the server memory of one held lock.
func (r memoryResult) heldBytesPerLock() float64 { return r.perLocked(r.Held.Bytes, r.Base.Bytes) }

// heldKeysPerLock is the keys (znodes) that one held lock stores.
func (r memoryResult) heldKeysPerLock() float64 { return r.perLocked(r.Held.Keys, r.Base.Keys) }

// leftBytesPerKey is the server memory that a key once locked and released
// still takes.
func (r memoryResult) leftBytesPerKey() float64 { return r.perLocked(r.Released.Bytes, r.Base.Bytes) }

// leftKeysPerKey is the keys (znodes) that a key once locked and released
// leaves behind.
func (r memoryResult) leftKeysPerKey() float64 { return r.perLocked(r.Released.Keys, r.Base.Keys) }

// Leases of memoryTTL, so that no renewal runs while the keys are held.
const memoryTTL = 10 * time.Minute

// runMemorySection runs runMemory for every library, each on a fresh
// server.
func runMemorySection(libs []*library, quick bool, v variant) []memoryResult {
	var out []memoryResult
	for _, l := range libs {
		if l.Missing != "" {
			out = append(out, memoryResult{Lib: l.Name, Backend: l.Backend, Missing: l.Missing})
			continue
		}
		keys := memoryKeys(l, quick)
		r := runMemory(l, v, keys, 4, 64, 90*time.Second)
		log.Printf("memory %-18s locked %d of %d in %v, released in %v: %s/lock held (%s keys), %s and %s keys left per key (%s; %s) %s",
			l.Name, r.Locked, r.Keys, r.Acquire.Round(time.Millisecond), r.Release.Round(time.Millisecond),
			fmtBytes(r.heldBytesPerLock()), fmtFloat(r.heldKeysPerLock()), fmtBytes(r.leftBytesPerKey()), fmtFloat(r.leftKeysPerKey()),
			r.MemWhat, r.KeysWhat, r.Err)
		out = append(out, r)
	}
	return out
}

// runMemory starts a server of lib's backend for this run alone (started
// as the shared servers are, so nothing of another library's run is in
// it), takes keys distinct keys with workers goroutines over clients
// clients, reads the server's memory and key count before, while all are
// held and after all are released, and stops the server. Each phase is
// bounded by limit.
func runMemory(lib *library, v variant, keys, clients, workers int, limit time.Duration) memoryResult {
	r := memoryResult{Lib: lib.Name, Backend: lib.Backend, Keys: keys}
	s, err := startServer(lib.Backend, v)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	ms, err := openMultis(ctx, s, lib, clients, memoryTTL, false)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer closeMultis(ms)
	var errs []error
	sample := func(at string) memSample {
		x, err := s.memSample(lib.Backend, &r)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
		}
		return x
	}
	r.Base = sample("empty")
	t0 := time.Now()
	releases, locked, err := lockKeys(ctx, ms, keys, workers)
	r.Acquire = time.Since(t0)
	r.Locked = locked
	if err != nil {
		errs = append(errs, fmt.Errorf("lock: %w", err))
	} else if locked < keys {
		errs = append(errs, fmt.Errorf("only %d of %d keys taken within %v", locked, keys, limit))
	}
	r.Held = sample("held")
	t1 := time.Now()
	releaseKeys(releases, workers, limit)
	r.Release = time.Since(t1)
	r.Released = sample("released")
	if err := errors.Join(errs...); err != nil {
		r.Err = err.Error()
	}
	return r
}

// startServer starts one server of backend in variant v, as the shared
// servers of the run are started, and returns the servers that name it
// alone.
func startServer(backend string, v variant) (*servers, error) {
	s := &servers{env: &env{}}
	var err error
	switch backend {
	case "redis":
		if s.redis, err = startRedis(v); err == nil {
			s.env.redisAddr = s.redis.addr
		}
	case "zookeeper":
		if s.zk, err = startZooKeeper(v); err == nil {
			s.env.zkAddr = s.zk.addr
		}
	case "etcd":
		if s.etcd, err = startEtcd(v); err == nil {
			s.env.etcdAddr = s.etcd.addr
		}
	default:
		err = fmt.Errorf("unknown backend %q", backend)
	}
	return s, err
}

// memSample reads the server's memory and key count, and records in r
// what they measure.
func (s *servers) memSample(backend string, r *memoryResult) (memSample, error) {
	var x memSample
	var err error
	switch backend {
	case "redis":
		var clients int64
		if x.UsedMemory, clients, err = s.redisUsedMemory(); err != nil {
			return x, err
		}
		x.Bytes = x.UsedMemory - clients
		r.MemWhat = "Redis used_memory less mem_clients_normal"
		x.Keys, err = s.redisDBSize()
		r.KeysWhat = "DBSIZE"
	case "zookeeper":
		// zkHeap first: it waits until the server's count of nodes stops
		// changing (empty container nodes are deleted in the background).
		x.Bytes, r.MemWhat = s.zkHeap()
		x.Keys, err = s.zkZnodes()
		r.KeysWhat = "zk_znode_count (mntr)"
	case "etcd":
		if x.Bytes, err = s.etcdHeap(); err != nil {
			return x, err
		}
		r.MemWhat = "Go heap in use after a GC (etcd process)"
		x.Keys, err = s.etcdKeys()
		r.KeysWhat = "keys in etcd (a count-only range over all keys)"
	default:
		err = fmt.Errorf("unknown backend %q", backend)
	}
	return x, err
}

// zkZnodes returns the number of znodes in ZooKeeper's tree.
func (s *servers) zkZnodes() (int64, error) {
	m, err := s.mntr()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(m["zk_znode_count"], 10, 64)
}

// etcdKeys returns the number of keys in etcd: all of them, as the server
// of a memory run holds the keys of one library only.
func (s *servers) etcdKeys() (int64, error) {
	cli, err := etcdClient(s.env)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// memoryKeys is the number of distinct keys each library holds at once in
// the memory section: 20,000 instead of 100,000 on ZooKeeper and etcd,
// whose locks are slower to take (100,000 took 17–35 s per library, plus
// the release); memory per lock does not depend on the count.
func memoryKeys(l *library, quick bool) int {
	switch {
	case quick:
		return 2000
	case l.Backend != "redis":
		return 20000
	}
	return 100000
}

// stop stops every server of s.
func (s *servers) stop() {
	s.redis.stop()
	s.zk.stop()
	s.etcd.stop()
}
