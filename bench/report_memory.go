package main

import (
	"fmt"
	"math"
	"strings"
)

// memoryReport writes the memory section: the server memory and keys of a
// held lock, and what a key leaves once released, each library on a server
// of its own.
func memoryReport(m *md, res *results) {
	m.p("### Server memory per lock, and what a released key leaves")
	m.p("")
	if notMeasured(m, len(res.Memory), "memory") {
		return
	}
	m.p("Measured by `%s`; the section alone: `cd bench && ./run.sh -only memory` (add `-quick` for 2,000", res.Command)
	m.p("keys per library). Each library runs on a server of its own, started for its run alone as the shared")
	m.p("servers are (%s), so", res.Variant.label())
	m.p("that nothing another library did is in its figures. 64 goroutines over 4 clients take distinct free")
	m.p("keys with `Lock` (leases of 10 minutes, so that no renewal runs) until all are held at once, then")
	m.p("release them all: 100,000 keys on Redis, 20,000 on ZooKeeper and etcd, whose locks are slower to take")
	m.p("(the server's fixed costs, such as a table's growth, are then spread over fewer keys). The server's")
	m.p("memory and its count of keys are read three times: with the clients connected and no lock (*empty*),")
	m.p("with every key held, and after every key was released.")
	m.p("")
	m.p("- **Per held lock**: (held − empty) ÷ the keys held.")
	m.p("- **Left per key**: (released − empty) ÷ the keys locked: what the server still keeps for each key")
	m.p("  once locked, after its release. A library that cleans up leaves 0 keys and about 0 bytes.")
	m.p("- **Memory**: Redis `used_memory` less the client buffers (`mem_clients_normal`, read 1.1 s after the")
	m.p("  change, once Redis' client accounting has caught up); ZooKeeper's JVM heap after a full GC; etcd's")
	m.p("  Go heap after a GC. **Keys**: Redis `DBSIZE`; ZooKeeper's `zk_znode_count`, read once it stops")
	m.p("  changing (the server deletes empty container nodes in the background); etcd: a count of all its")
	m.p("  keys. etcd keeps a deleted key's history (its revisions) until the keyspace is compacted, which")
	m.p("  nothing here does: memory left without keys left is that history.")
	m.p("- **dlock on Redis** keeps no key of a released lock's own: what it leaves is one token record per")
	m.p("  Redis Cluster hash slot used (16,384 at most, whatever the number of keys ever locked) and one")
	m.p("  release trace per slot, which expires with the released lease's TTL (10 minutes here; docs/redis.md,")
	m.p("  \"Keys\"). 100,000 keys use every slot, so its *keys left* is that bound, not a cost per key.")
	m.p("")
	var rows [][]string
	for _, r := range res.Memory {
		if r.Missing != "" {
			rows = append(rows, []string{r.Lib, r.Missing, "", "", "", "", "", "", "", ""})
			continue
		}
		empty, left := "–", "–"
		if r.MemWhat != "" {
			empty = fmt.Sprintf("%s, %d", fmtBytes(float64(r.Base.Bytes)), r.Base.Keys)
		}
		if r.Locked > 0 {
			left = fmt.Sprint(r.Released.Keys - r.Base.Keys)
		}
		rows = append(rows, []string{r.Lib,
			fmt.Sprintf("%d of %d", r.Locked, r.Keys), fmtDur(r.Acquire), fmtDur(r.Release), empty,
			memCell(r.heldBytesPerLock(), r.heldKeysPerLock()),
			memCell(r.leftBytesPerKey(), r.leftKeysPerKey()),
			left, strings.Trim(r.MemWhat+"; "+r.KeysWhat, "; "), short(r.Err)})
	}
	m.table([]string{"library", "keys held", "acquired in", "released in", "empty: memory, keys", "per held lock: memory, keys",
		"left per key: memory, keys", "keys left", "measured as", "error"}, rows)
}

// memCell is "bytes, keys" of one lock or key, "–" when no key was locked.
func memCell(bytes, keys float64) string {
	if math.IsNaN(bytes) {
		return "–"
	}
	return fmt.Sprintf("%s, %s", fmtBytes(bytes), fmtFloat(keys))
}
