package redisdlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/lease"
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

	var acks []acked // by run, with WAIT
	if d.waits() {
		acks = make([]acked, len(runs))
	}
	sendAt := func(ctx context.Context, at []int) {
		sent := runs
		if len(at) < len(runs) {
			sent = make([]*renewRun, len(at))
			for k, i := range at {
				sent[k] = runs[i]
			}
		}
		for k, ack := range d.sendRuns(ctx, sent) { // none without WAIT
			acks[at[k]] = ack
		}
	}
	pending := make([]int, len(runs))
	for i := range pending {
		pending[i] = i
	}
	untilAnswered(ctx, func(ctx context.Context) tryOutcome {
		sendAt(ctx, pending)
		// The server lost its script cache (a restart, SCRIPT FLUSH; a
		// node that never ran it): the runs it refused send the source
		// next, as script.run does.
		var again []int
		out := answered
		for _, i := range pending {
			switch err := runs[i].cmd.Err(); {
			case noScript(err):
				runs[i].args[0], runs[i].args[1] = "eval", renewScript.src
				again = append(again, i)
				out = max(out, resend)
			case silent(err):
				again = append(again, i)
				out = unanswered // on another connection, resent or not
			}
		}
		pending = again
		return out
	})
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

// renewTries bounds the tries of one renewal on connections that stay
// silent: see untilAnswered.
const renewTries = 3

// tryOutcome is how one try of a renewal's request ended: see untilAnswered.
type tryOutcome int

const (
	// answered: an answer to take as it is.
	answered tryOutcome = iota
	// unanswered: no answer in time (silent): send again, on another
	// connection.
	unanswered
	// resend: answered NOSCRIPT (the server has not got the script and
	// ran nothing): send the source at once, on the same connection.
	resend
)

// untilAnswered runs try, a renewal's request, with a deadline of
// lease.TryTimeout's (half of what is left of ctx, no floor), and runs it
// again while it reports that its connection gave no answer by then, the
// last time with all that is left, at most renewTries times in all.
// go-redis drops a connection whose read timed out from its pool, so each
// try goes out on another one; with ContextTimeoutEnabled, which gives
// go-redis ctx's deadline as the read deadline. A try answered NOSCRIPT is
// sent again at once, not counted, with a deadline as far off as the try's
// was: the connection answered, and the two round trips of a first renewal
// on a server without the script need not fit in one try's time. The
// renewal counts from the moment the first try was sent (the caller's),
// never from a later one: an unanswered try may have acted.
func untilAnswered(ctx context.Context, try func(ctx context.Context) tryOutcome) {
	var budget time.Duration
	bounded, resent, resending := false, false, false
	for i := 1; ; {
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if i < renewTries {
			if !resending {
				budget, bounded = lease.TryTimeout(ctx, time.Time{}, 0)
			}
			if bounded {
				tctx, cancel = context.WithTimeout(ctx, budget)
			}
		}
		out := try(tctx)
		cancel()
		resending = false
		switch {
		case out == answered || ctx.Err() != nil:
			return
		case out == resend && !resent:
			resent, resending = true, true // once: the source is not refused
		case i == renewTries:
			return
		default:
			i++
		}
	}
}

// silent reports whether err says that a request got no answer in time:
// its deadline passed, or its connection's read or write timed out.
func silent(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
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
