package redisdlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipe sends one Client's script calls, coalescing the calls that overlap
// into go-redis pipelines: while maxFlights requests are on the wire, a
// new call waits in a queue, and when one of them comes back the whole
// queue goes out as one pipeline. A lone call, or a few at a time, goes
// straight out as a plain request on the caller's goroutine, as before:
// the coalescing costs nothing until the calls overlap. Under load the
// server then reads and answers many scripts per system call, which is
// most of its time per small script.
//
// Each call keeps its own context: a call that ends while queued is taken
// out of the queue and never sent; one that ends while its pipeline is on
// the wire returns at once, and a later call on the same key waits (within
// its own context) until that pipeline is answered, so that a cleanup
// (abandon's release) cannot reach the server before the request it cleans
// up after. The pipeline's own context ends when every call in it has
// ended, or at the latest of their deadlines.
//
// go-redis's AutoPipeliner does not fit: it runs a batched command under
// its own context, not the caller's, and its Do is not batched at all.
type pipe struct {
	rdb        redis.UniversalClient
	maxFlights int

	mu      sync.Mutex
	flights int                   // requests and pipelines on the wire
	onWire  int                   // calls in pipelines on the wire
	queue   []*pipeCall           // calls waiting for a flight to come back
	left    map[string]*pipeBatch // first key of a call that left its batch on the wire
}

// defaultMaxFlights is how many requests or pipelines one Client keeps on
// the wire before it queues calls: enough that a few concurrent calls go
// straight out as before, few enough that under load each pipeline
// carries many calls.
const defaultMaxFlights = 2

func newPipe(rdb redis.UniversalClient) *pipe {
	return &pipe{rdb: rdb, maxFlights: defaultMaxFlights}
}

// pipeCall is one queued call.
type pipeCall struct {
	ctx   context.Context
	cmd   *redis.Cmd
	key   string     // the first key's name (a[3])
	batch *pipeBatch // set when the call's pipeline is sent
	done  chan struct{}
}

// pipeBatch is one pipeline of calls on the wire.
type pipeBatch struct {
	calls  []*pipeCall
	live   int // calls still waiting for the reply (under pipe.mu)
	cancel context.CancelFunc
	done   chan struct{} // closed when every reply is in
}

// do sends EVALSHA or EVAL with arguments a (a[3] is the first key) and
// returns its command, answered or failed.
func (p *pipe) do(ctx context.Context, a []any) *redis.Cmd {
	p.mu.Lock()
	if len(p.left) > 0 {
		if b := p.left[keyName(a[3])]; b != nil {
			p.mu.Unlock()
			select {
			case <-b.done:
			case <-ctx.Done():
				cmd := redis.NewCmd(ctx, a...)
				cmd.SetErr(ctx.Err())
				return cmd
			}
			p.mu.Lock()
		}
	}
	if p.flights < p.maxFlights {
		p.flights++
		p.mu.Unlock()
		cmd := p.rdb.Do(ctx, a...)
		p.land()
		return cmd
	}
	// The caller reuses a's array (a grant's next command): the queued
	// command keeps a copy.
	c := &pipeCall{ctx: ctx, cmd: redis.NewCmd(ctx, slices.Clone(a)...), key: keyName(a[3]), done: make(chan struct{})}
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	default:
	}
	cmd := redis.NewCmd(ctx, a...)
	cmd.SetErr(ctx.Err())
	if c.batch == nil {
		// Still queued: never sent.
		if i := slices.Index(p.queue, c); i >= 0 {
			p.queue = slices.Delete(p.queue, i, i+1)
		}
		return cmd
	}
	// On the wire: the server may run it; keep the key's next call
	// behind it.
	if p.left == nil {
		p.left = map[string]*pipeBatch{}
	}
	p.left[c.key] = c.batch
	c.batch.live--
	if c.batch.live == 0 {
		c.batch.cancel()
	}
	return cmd
}

// land ends a flight: the queue, if any, takes its place as one pipeline.
func (p *pipe) land() {
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.flights--
		p.mu.Unlock()
		return
	}
	b := &pipeBatch{calls: p.queue, live: len(p.queue), done: make(chan struct{})}
	p.queue = nil
	p.onWire += len(b.calls)
	var ctx context.Context
	ctx, b.cancel = p.batchContext(b.calls)
	for _, c := range b.calls {
		c.batch = b
	}
	p.mu.Unlock()
	go p.send(ctx, b)
}

// batchContext returns the context of a pipeline of calls: cancelled when
// every call has left (do), with the latest of their deadlines if they all
// have one.
func (p *pipe) batchContext(calls []*pipeCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// send runs b as one pipeline, hands each call its reply, and lands.
func (p *pipe) send(ctx context.Context, b *pipeBatch) {
	if len(b.calls) == 1 {
		_ = p.rdb.Process(ctx, b.calls[0].cmd)
	} else {
		pl := p.rdb.Pipeline()
		for _, c := range b.calls {
			_ = pl.Process(ctx, c.cmd)
		}
		_, _ = pl.Exec(ctx) // each command's own error is read from it
	}
	b.cancel()
	p.mu.Lock()
	for _, c := range b.calls {
		close(c.done)
		if p.left[c.key] == b {
			delete(p.left, c.key)
		}
	}
	close(b.done)
	p.onWire -= len(b.calls)
	p.mu.Unlock()
	p.land()
}
