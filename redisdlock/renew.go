package redisdlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// renewBatchMax bounds the leases one run of renew.lua extends: the server
// runs nothing else meanwhile, and each lease costs it a few µs, so a run
// of 256 keeps it well under a millisecond.
const renewBatchMax = 256

// RenewBatch implements driver.BatchRenewer: it extends every grant as its
// Renew would, with renew.lua runs of up to renewBatchMax grants each, all
// sent in one pipeline. A script touches one Cluster slot only, so on a
// Cluster the grants are grouped by slot, one run per slot, and go-redis
// sends each node its runs in one pipeline of its own, the nodes in
// parallel: one request per slot held, one round trip per node.
func (d *redisDriver) RenewBatch(ctx context.Context, grants []driver.Grant) []error {
	sent := time.Now()
	var errs []error // made at the first failure: nil means all renewed
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(grants))
		}
		errs[i] = err
	}
	if err := d.notify.unreachable(); err != nil {
		err = wrapErr(fmt.Sprintf("redis at %s: renew", d.addr), err)
		for i := range grants {
			fail(i, err)
		}
		return errs
	}

	// The grants in the order they are sent, by slot and TTL on a Cluster
	// (one run per slot), by TTL elsewhere: one run takes one TTL.
	_, cluster := d.rdb.(*redis.ClusterClient)
	type item struct {
		i    int
		g    *grant
		slot int
	}
	items := make([]item, 0, len(grants))
	for i, dg := range grants {
		g, ok := dg.(*grant)
		if !ok || g.d != d {
			fail(i, fmt.Errorf("redisdlock: RenewBatch: grant %T not from this driver", dg))
			continue
		}
		it := item{i: i, g: g}
		if cluster {
			it.slot = hashSlot(keyName(g.keys[0]))
		}
		items = append(items, it)
	}
	slices.SortStableFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.slot, b.slot), cmp.Compare(a.g.ttl, b.g.ttl))
	})

	// One run per stretch of items of one slot and TTL, at most
	// renewBatchMax long.
	var runs []*renewRun
	for len(items) > 0 {
		n := 1
		for n < len(items) && n < renewBatchMax && items[n].slot == items[0].slot && items[n].g.ttl == items[0].g.ttl {
			n++
		}
		args := make([]any, 0, 4+2*n)
		args = append(args, "evalsha", renewScript.sha, numKeys(n))
		for _, it := range items[:n] {
			args = append(args, it.g.keys[0])
		}
		args = append(args, &items[0].g.ttlMs)
		for _, it := range items[:n] {
			args = append(args, &it.g.owner)
		}
		run := &renewRun{args: args}
		for _, it := range items[:n] {
			run.grants, run.at = append(run.grants, it.g), append(run.at, it.i)
		}
		runs = append(runs, run)
		items = items[n:]
	}

	acks := d.sendRuns(ctx, runs)
	// The server lost its script cache (a restart, SCRIPT FLUSH; a node
	// that never ran it): send the source of the runs it refused, as
	// script.run does.
	var again []*renewRun
	var at []int
	for i, r := range runs {
		if err := r.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			r.args[0], r.args[1] = "eval", renewScript.src
			again, at = append(again, r), append(at, i)
		}
	}
	for k, ack := range d.sendRuns(ctx, again) { // none without WAIT
		acks[at[k]] = ack
	}
	received := time.Now()

	for i, r := range runs {
		v, err := r.cmd.Slice()
		if err == nil {
			if server, ok := parseRenewTime(v, len(r.grants)); ok {
				now := clockReading{sent: sent, received: received, serverUs: server}
				var ackErr error
				if acks != nil {
					ackErr = d.ackErr(acks[i], "renewal")
				}
				for k, g := range r.grants {
					held := v[2+k] == int64(1)
					if held && ackErr != nil {
						fail(r.at[k], ackErr) // a failed renewal, as Renew's
					} else if err := g.renewed(held, now); err != nil {
						fail(r.at[k], err)
					}
				}
				continue
			}
			err = fmt.Errorf("redis at %s: renew: unexpected reply %v", d.addr, v)
		} else {
			err = wrapErr(fmt.Sprintf("redis at %s: renew", d.addr), err)
		}
		for _, i := range r.at {
			fail(i, err)
		}
	}
	return errs
}

// renewRun is one run of renew.lua in a RenewBatch: its grants, their
// places in RenewBatch's argument, the command's arguments and the command.
type renewRun struct {
	grants []*grant
	at     []int
	args   []any
	cmd    *redis.Cmd
}

// sendRuns sends runs as send does, or with WAIT behind them when d waits
// for replicas (sendRunsAcked), and returns the runs' acknowledgements
// (nil without WAIT).
func (d *redisDriver) sendRuns(ctx context.Context, runs []*renewRun) []acked {
	if d.waits() {
		return d.sendRunsAcked(ctx, runs)
	}
	d.send(ctx, runs)
	return nil // nothing to read: ackErr ignores a zero acked
}

// send sends runs, in one pipeline when there are several (on a Cluster,
// go-redis splits it by node and sends each node its part at once).
func (d *redisDriver) send(ctx context.Context, runs []*renewRun) {
	switch len(runs) {
	case 0:
	case 1:
		runs[0].cmd = d.rdb.Do(ctx, runs[0].args...)
	default:
		pipe := d.rdb.Pipeline()
		for _, r := range runs {
			r.cmd = pipe.Do(ctx, r.args...)
		}
		_, _ = pipe.Exec(ctx) // each command's own error is read from it
	}
}
