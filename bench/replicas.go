package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// ---- replicas: the cost of redisdlock's WaitReplicas ----

// replicasVariants are the clients the section compares, on one primary
// with one replica: dlock as everywhere else, and with every grant,
// renewal and release acknowledged by the replica (WAIT 1).
var replicasVariants = []struct {
	name string
	opts *redisdlock.Options
}{
	{"dlock (redis)", nil},
	{"dlock (redis, wait_replicas=1)", &redisdlock.Options{WaitReplicas: 1}},
}

type replicasResult struct {
	Lib      string
	Round    int
	N        int
	P50, P99 time.Duration
	Err      string
}

// runReplicasSection starts a primary and a replica of its own (the
// variant's persistence) and times uncontended cycles (Lock, then Unlock)
// of each of replicasVariants against the primary, round after round, the
// variants in turn so that a busy spell of the machine falls on both.
func runReplicasSection(cfg config) []replicasResult {
	fail := func(err error) []replicasResult {
		log.Printf("replicas: %v", err)
		var out []replicasResult
		for _, v := range replicasVariants {
			out = append(out, replicasResult{Lib: v.name, Round: 1, Err: err.Error()})
		}
		return out
	}
	primary, err := startRedis(cfg.variant)
	if err != nil {
		return fail(err)
	}
	defer primary.stop()
	host, port, _ := net.SplitHostPort(primary.addr)
	replica, err := startRedis(cfg.variant, "--replicaof", host, port)
	if err != nil {
		return fail(err)
	}
	defer replica.stop()
	rc := redis.NewClient(&redis.Options{Addr: replica.addr})
	defer rc.Close()
	if err := replica.waitReady(30*time.Second, func(ctx context.Context) error {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = fmt.Errorf("replica's link not up")
		}
		return err
	}); err != nil {
		return fail(err)
	}

	n, limit := 2000, 3*time.Second
	if cfg.quick {
		n, limit = 300, time.Second
	}
	var out []replicasResult
	for round := 1; round <= cfg.rounds; round++ {
		for i := range replicasVariants {
			// The first variant alternates, as inRoundOrder does.
			v := replicasVariants[(i+round-1)%len(replicasVariants)]
			r := runReplicasCycles(primary.addr, v.opts, n, limit)
			r.Lib, r.Round = v.name, round
			log.Printf("replicas %-32s n=%d p50 %v p99 %v %s", r.Lib, r.N, r.P50, r.P99, r.Err)
			out = append(out, r)
		}
	}
	return out
}

// runReplicasCycles times up to n uncontended cycles within limit, after
// n/10 (at least 5) to warm up, on a client of addr with opts.
func runReplicasCycles(addr string, opts *redisdlock.Options, n int, limit time.Duration) replicasResult {
	var r replicasResult
	ctx, cancel := context.WithTimeout(context.Background(), limit+30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, err := redisdlock.New(ctx, rdb, opts)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer c.Close()
	cycle := func() error {
		l, err := c.Lock(ctx, "replicas")
		if err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if err := l.Unlock(ctx); err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
		return nil
	}
	for range max(n/10, 5) {
		if err := cycle(); err != nil {
			r.Err = err.Error()
			return r
		}
	}
	ds := make([]time.Duration, 0, n)
	end := time.Now().Add(limit)
	for range n {
		if time.Now().After(end) {
			break
		}
		t := time.Now()
		if err := cycle(); err != nil {
			r.Err = err.Error()
			break
		}
		ds = append(ds, time.Since(t))
	}
	r.N, r.P50, r.P99 = len(ds), percentile(ds, 50), percentile(ds, 99)
	return r
}

// replicasReport writes the replicas section: each round's cycle times with
// and without WaitReplicas, and their ratio in that round.
func replicasReport(m *md, res *results) {
	m.p("### Replica acknowledgement (redisdlock WaitReplicas)")
	m.p("")
	if notMeasured(m, len(res.Replicas), "replicas") {
		return
	}
	m.p("One client, one key, Lock then Unlock, against a Redis primary with one replica on the same machine")
	m.p("(a server pair of its own, %s): dlock as in the uncontended section, and with `wait_replicas=1`, where", res.Variant.label())
	m.p("the grant and the release each carry `WAIT 1 100` pipelined behind their script. The ratio is to dlock")
	m.p("without it in the same round.")
	m.p("")
	base := map[int]replicasResult{}
	for _, r := range res.Replicas {
		if r.Lib == replicasVariants[0].name {
			base[r.Round] = r
		}
	}
	var rows [][]string
	for _, r := range res.Replicas {
		ratio := ""
		if b, ok := base[r.Round]; ok && r.Lib != b.Lib && b.P50 > 0 && r.P50 > 0 {
			ratio = fmt.Sprintf("%.2f× p50, %.2f× p99", float64(r.P50)/float64(b.P50), float64(r.P99)/float64(max(b.P99, 1)))
		}
		rows = append(rows, []string{fmt.Sprint(r.Round), r.Lib, fmt.Sprint(r.N), fmtDur(r.P50), fmtDur(r.P99), ratio, r.Err})
	}
	m.table([]string{"round", "client", "cycles", "cycle p50", "cycle p99", "vs without", "error"}, rows)
}
