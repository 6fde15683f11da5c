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
// queue goes out as one pipeline. A lone call, or up to maxFlights at a
// time, goes straight out as a plain request on the caller's goroutine:
// nothing changes until more calls than that overlap. Under load the server then reads
// and answers many scripts per system call, and the client writes and reads
// them with one each.
//
// Each call keeps its own context: a call that ends while queued is taken
// out of the queue and never sent; one that ends while its pipeline is on
// the wire returns at once. If that was an acquire, the next release of
// its key waits (within its own context) until that pipeline is answered,
// so that the cleanup (abandon's release) cannot reach the server before
// the acquire it cleans up after. Other calls do not wait: a renewal must
// be free to go out on another connection while one is silent. The
// pipeline's own context ends when every call in it has ended, or at the
// latest of their deadlines.
//
// go-redis's AutoPipeliner does not fit: it runs a batched command under
// its own context, not the caller's, and its Do is not batched at all.
type pipe struct {
	rdb        redis.UniversalClient
	maxFlights int

	mu      sync.Mutex
	flights int        // requests and pipelines on the wire
	onWire  int        // calls in pipelines on the wire
	next    *pipeBatch // the queue: the calls of the next pipeline, or nil
	// The first key of each acquire that left its pipeline on the wire,
	// and that pipeline.
	left map[string]*pipeBatch
}

// pipeRole is what a call is to the ordering of an abandoned acquire and
// its cleanup (see pipe).
type pipeRole uint8

const (
	roleOther   pipeRole = iota
	roleAcquire          // leaving on the wire holds back its key's release
	roleRelease          // waits for its key's acquire left on the wire
	roleRenew            // never queued: see do
)

// defaultMaxFlights is how many requests or pipelines one Client keeps on
// the wire before it queues calls. With 16 goroutines on one Client and
// distinct keys (bench's keys section, quiet machine), locks/s at 2, 3, 4,
// 5, 6, 8 and 16 flights: 45k, 49–55k, 52–54k, 52–54k, 52–53k, 48k, 43k:
// fewer flights leave the server idle while a pipeline is out, more batch
// less (at 8, 1.25 server reads per cycle against 0.4 at 2).
const defaultMaxFlights = 4

func newPipe(rdb redis.UniversalClient) *pipe {
	return &pipe{rdb: rdb, maxFlights: defaultMaxFlights}
}

// pipeCall is one queued call.
type pipeCall struct {
	ctx  context.Context
	cmd  *redis.Cmd
	role pipeRole
	key  string // the first key's name (a[3])
	args [3 + 6 + 9]any
}

// pipeBatch is one pipeline of calls: queued, then sent.
type pipeBatch struct {
	calls  []*pipeCall
	sent   bool
	live   int // calls sent and still waiting for the reply
	cancel context.CancelFunc
	done   chan struct{} // closed when every reply is in
}

// do sends EVALSHA or EVAL with arguments a (a[3] is the first key) and
// returns its command, answered or failed. The caller may reuse a's array
// once do returns.
func (p *pipe) do(ctx context.Context, a []any, role pipeRole) *redis.Cmd {
	if role == roleRenew {
		// A renewal goes out at once, on a connection of its own if need
		// be: queued behind calls stuck on a silent connection, it would
		// wait for their deadlines, which can be later than its lease's.
		return p.rdb.Do(ctx, a...)
	}
	p.mu.Lock()
	if role == roleRelease && len(p.left) > 0 {
		if b := p.left[keyName(a[3])]; b != nil {
			p.mu.Unlock()
			select {
			case <-b.done:
			case <-ctx.Done():
				return failedCmd(ctx, a, ctx.Err())
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
	// Queued: the command keeps a copy of a, which the caller reuses (a
	// grant's next command) even while an abandoned call is on the wire.
	c := &pipeCall{ctx: ctx, role: role, key: keyName(a[3])}
	args := c.args[:0]
	if len(a) > len(c.args) {
		args = nil
	}
	c.cmd = redis.NewCmd(ctx, append(args, a...)...)
	if p.next == nil {
		p.next = &pipeBatch{done: make(chan struct{})}
	}
	b := p.next
	b.calls = append(b.calls, c)
	p.mu.Unlock()
	select {
	case <-b.done:
		return c.cmd
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-b.done:
		return c.cmd
	default:
	}
	if !b.sent {
		// Still queued: never sent.
		b.calls = slices.DeleteFunc(b.calls, func(o *pipeCall) bool { return o == c })
		return failedCmd(ctx, a, ctx.Err())
	}
	// On the wire: the server may run it; an acquire keeps its key's
	// release behind it.
	if c.role == roleAcquire {
		if p.left == nil {
			p.left = map[string]*pipeBatch{}
		}
		p.left[c.key] = b
	}
	b.live--
	if b.live == 0 {
		b.cancel()
	}
	return failedCmd(ctx, a, ctx.Err())
}

// failedCmd returns a command with arguments a that failed with err.
func failedCmd(ctx context.Context, a []any, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx, a...)
	cmd.SetErr(err)
	return cmd
}

// land ends a flight: the queue, if any, takes its place as one pipeline.
func (p *pipe) land() {
	p.mu.Lock()
	b := p.next
	if b == nil || len(b.calls) == 0 {
		p.flights--
		p.mu.Unlock()
		return
	}
	p.next = nil
	b.sent, b.live = true, len(b.calls)
	p.onWire += len(b.calls)
	ctx, cancel := b.context()
	b.cancel = cancel
	p.mu.Unlock()
	go p.send(ctx, b)
}

// context returns the context of b's pipeline: cancelled when every call
// has left it (do), with the latest of their deadlines if they all have
// one.
func (b *pipeBatch) context() (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range b.calls {
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
		if p.left[c.key] == b {
			delete(p.left, c.key)
		}
	}
	p.onWire -= len(b.calls)
	close(b.done)
	p.mu.Unlock()
	p.land()
}
