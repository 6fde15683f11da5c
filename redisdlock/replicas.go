package redisdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// DefaultWaitTimeout is how long a grant, a renewal or a release waits for
// its replicas' acknowledgement when Options.WaitReplicas is set. A replica
// that keeps up acknowledges within a round trip (WAIT asks it at once), so
// 100 ms is long against that, yet short enough that a renewal refused for
// a lagging replica can be retried several times within a lease.
const DefaultWaitTimeout = 100 * time.Millisecond

// acked is WAIT's answer after a script: how many replicas acknowledged
// every write the connection had sent, and the error, if WAIT failed.
type acked struct {
	n   int64
	err error
}

// waits reports whether d sends WAIT after its writes.
func (d *redisDriver) waits() bool { return d.opts.WaitReplicas > 0 }

// sendAcked runs the script as send does and, when d waits for replicas,
// sends WAIT numreplicas timeout right behind it, pipelined on the same
// connection: WAIT counts the replicas that have every write that
// connection made, the script's included. On a Cluster the pair goes to
// the master of the script's first key, whose replicas are the ones that
// matter (go-redis would send a keyless WAIT to any node).
func (s *script) sendAcked(ctx context.Context, d *redisDriver, a []any) (*redis.Cmd, acked) {
	cmd, ack := s.sendAckedAs(ctx, d, a, false)
	if noScript(cmd.Err()) {
		cmd, ack = s.sendAckedAs(ctx, d, a, true)
	}
	return cmd, ack
}

// sendAckedAs is sendAcked sending a once, as sendAs does, with no
// fallback.
func (s *script) sendAckedAs(ctx context.Context, d *redisDriver, a []any, src bool) (*redis.Cmd, acked) {
	if !d.waits() {
		return s.sendAs(ctx, d, a, src), acked{}
	}
	if err := d.notify.unreachable(); err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, acked{err: err}
	}
	pl, err := d.pipelinerFor(ctx, a[3])
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, acked{err: err}
	}
	a[0], a[1] = "evalsha", s.sha
	if src {
		a[0], a[1] = "eval", s.src
	}
	cmd, ack := d.runAcked(ctx, pl, a)
	// The slot moved: the caller's retry needs go-redis's new map of the
	// slots, which a pipeline of the node's own client does not update.
	if c, ok := d.rdb.(*redis.ClusterClient); ok && cmd.Err() != nil &&
		(redis.HasErrorPrefix(cmd.Err(), "MOVED") || redis.HasErrorPrefix(cmd.Err(), "ASK")) {
		c.ReloadState(ctx)
		cmd.SetErr(fmt.Errorf("%w: the key's slot moved to another node: %w", driver.ErrUnavailable, cmd.Err()))
	}
	return cmd, ack
}

// runAcked sends a and WAIT in one pipeline of pl.
func (d *redisDriver) runAcked(ctx context.Context, pl redis.Pipeliner, a []any) (*redis.Cmd, acked) {
	cmd := pl.Do(ctx, a...)
	w := d.waitCmd(ctx, pl)
	_, _ = pl.Exec(ctx) // each command's own error is read from it
	n, err := w.Int64()
	return cmd, acked{n: n, err: err}
}

// waitCmd queues WAIT numreplicas timeout on pl.
func (d *redisDriver) waitCmd(ctx context.Context, pl redis.Pipeliner) *redis.Cmd {
	return pl.Do(ctx, "wait", d.opts.WaitReplicas, ms(d.opts.WaitTimeout))
}

// pipelinerFor returns a pipeline whose commands all go on one connection
// to the master that owns key (a boxed *string, as the scripts' keys are).
func (d *redisDriver) pipelinerFor(ctx context.Context, key any) (redis.Pipeliner, error) {
	c, ok := d.rdb.(*redis.ClusterClient)
	if !ok {
		return d.rdb.Pipeline(), nil
	}
	node, err := c.MasterForKey(ctx, keyName(key))
	if err != nil {
		return nil, err
	}
	return node.Pipeline(), nil
}

// ackErr returns nil when ack counts the replicas asked for, and otherwise
// an error satisfying errors.Is(err, dlock.ErrUnavailable) that says what
// the replicas did; what names the operation.
func (d *redisDriver) ackErr(ack acked, what string) error {
	if !d.waits() {
		return nil
	}
	if ack.err != nil {
		return fmt.Errorf("%w: redis at %s: %s: WAIT for %d replicas: %w", driver.ErrUnavailable, d.addr, what, d.opts.WaitReplicas, ack.err)
	}
	if ack.n < int64(d.opts.WaitReplicas) {
		return fmt.Errorf("%w: redis at %s: %s acknowledged by %d of %d replicas within %v", driver.ErrUnavailable, d.addr, what, ack.n, d.opts.WaitReplicas, d.opts.WaitTimeout)
	}
	return nil
}

// sendRunsAcked is send (renew.go) for a driver that waits for replicas:
// the runs in one pipeline per master followed by one WAIT, which covers
// them all, the masters in parallel. It returns each run's acknowledgement.
func (d *redisDriver) sendRunsAcked(ctx context.Context, runs []*renewRun) []acked {
	acks := make([]acked, len(runs))
	if len(runs) == 0 {
		return acks
	}
	if _, ok := d.rdb.(*redis.ClusterClient); !ok {
		pl := d.rdb.Pipeline()
		for _, r := range runs {
			r.cmd = pl.Do(ctx, r.args...)
		}
		w := d.waitCmd(ctx, pl)
		_, _ = pl.Exec(ctx)
		n, err := w.Int64()
		for i := range acks {
			acks[i] = acked{n: n, err: err}
		}
		return acks
	}
	// A Cluster: group the runs by the master of their slot.
	byNode := map[redis.Pipeliner][]int{}
	nodes := map[string]redis.Pipeliner{}
	c := d.rdb.(*redis.ClusterClient)
	for i, r := range runs {
		node, err := c.MasterForKey(ctx, keyName(r.args[3]))
		if err != nil {
			r.cmd = redis.NewCmd(ctx)
			r.cmd.SetErr(err)
			acks[i] = acked{err: err}
			continue
		}
		addr := node.Options().Addr
		pl, ok := nodes[addr]
		if !ok {
			pl = node.Pipeline()
			nodes[addr] = pl
		}
		byNode[pl] = append(byNode[pl], i)
	}
	var wg sync.WaitGroup
	for pl, idx := range byNode {
		wg.Go(func() {
			for _, i := range idx {
				runs[i].cmd = pl.Do(ctx, runs[i].args...)
			}
			w := d.waitCmd(ctx, pl)
			_, _ = pl.Exec(ctx)
			n, err := w.Int64()
			for _, i := range idx {
				acks[i] = acked{n: n, err: err}
			}
		})
	}
	wg.Wait()
	return acks
}

// checkWaitTimeout refuses a WaitTimeout that rdb's read timeout would cut
// short: the pipeline's reply would then be read as a network failure.
func checkWaitTimeout(rdb redis.UniversalClient, o Options) error {
	if o.WaitReplicas == 0 {
		return nil
	}
	var read time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	}
	if read > 0 && o.WaitTimeout >= read {
		return fmt.Errorf("wait timeout %v is not below the client's read timeout %v", o.WaitTimeout, read)
	}
	return nil
}
