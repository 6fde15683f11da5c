// Package faultproxy is the TCP proxy that dlock's tests put between a
// client and a server to inject network faults: the conformance suite's
// dlocktest.Proxy (Blackhole, Restore, Reset) and faultinject's scenarios,
// which also delay, half-open, and drop the reply to one request of Redis'
// or ZooKeeper's protocol. One proxy serves both: the suite uses the raw
// subset, so that a fault means the same thing in both. It is test support,
// not for applications.
package faultproxy

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on a loopback port, put between the clients of one
// process and one server, that injects network faults:
//
//   - SetLatency delays every frame in one or both directions;
//   - Blackhole holds all traffic (nothing is lost: it flows again on
//     Restore), as a partition or a frozen peer would;
//   - HalfOpen discards all traffic and never closes a connection: no RST,
//     no data, as a dead peer behind a NAT;
//   - Stall holds the traffic of the connections open now, and only
//     theirs, as a NAT that lost their state would: new connections flow;
//   - Reset closes every connection at once;
//   - DropReply forwards the next request matching a predicate, discards
//     its reply and closes the connection: the server acted, the client
//     never learns the outcome and retries on a new connection.
//
// With a Protocol other than Raw the proxy cuts the stream into requests and
// replies (Frame), so that faults target one request. It is safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	proto  Protocol
	now    func() int64 // Options.Clock

	mu         sync.Mutex
	cond       *sync.Cond
	closed     bool                // guarded by mu
	hold       bool                // Blackhole; guarded by mu
	discard    bool                // HalfOpen; guarded by mu
	holdTagged bool                // HoldTagged; guarded by mu
	holdReq    func(*Frame) bool   // client frames to hold (DropReply); guarded by mu
	tag        func(*Frame) bool   // tags connections; guarded by mu
	filter     func(*Frame) bool   // client frames to discard; guarded by mu
	latUp      time.Duration       // guarded by mu
	latDown    time.Duration       // guarded by mu
	conns      map[*pconn]struct{} // guarded by mu
	drops      []*Drop             // armed, not yet matched; guarded by mu
	observers  map[*Observer]struct{}
	nextID     uint64

	lastUp   atomic.Int64 // time of the last frame written to the server
	accepted atomic.Int64
	wg       sync.WaitGroup
}

// Options configure a Proxy. A nil *Options is the zero value: a Raw proxy
// on a clock of its own.
type Options struct {
	// Protocol is how the proxy cuts the streams into frames. Default Raw:
	// the bytes as they arrive.
	Protocol Protocol
	// Clock returns the time in nanoseconds that Frame.At and LastUp are
	// read on and latencies counted from. Default: the nanoseconds since
	// New, on the process's monotonic clock; a test that compares them with
	// another process's times passes a clock both read (CLOCK_MONOTONIC).
	Clock func() int64
}

// New starts a proxy to target (host:port) on a loopback port. The caller
// closes it.
func New(target string, opts *Options) (*Proxy, error) {
	if opts == nil {
		opts = &Options{}
	}
	now := opts.Clock
	if now == nil {
		start := time.Now()
		now = func() int64 { return int64(time.Since(start)) }
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, proto: opts.Protocol, now: now, conns: map[*pconn]struct{}{}, observers: map[*Observer]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the server behind the proxy.
func (p *Proxy) Target() string { return p.target }

// Accepted counts the connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// LastUp returns the time (Options.Clock) at which the last client frame
// began to be written to the server, 0 if none was: a frame the server
// has answered began before LastUp.
func (p *Proxy) LastUp() int64 { return p.lastUp.Load() }

// SetLatency delays frames from the client (up) and from the server (down).
func (p *Proxy) SetLatency(up, down time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latUp, p.latDown = up, down
	p.cond.Broadcast()
}

// Blackhole holds all traffic in both directions without closing anything.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = true
}

// Stall holds all traffic, both ways, on the connections open now, without
// closing them; connections accepted later flow as usual. Restore ends it.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.stalled = true
	}
}

// HalfOpen silently discards all traffic in both directions from now on,
// on existing and new connections, and never closes a connection.
func (p *Proxy) HalfOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discard = true
}

// HoldTagged holds traffic on the connections tagged by Tag (on replication
// links, say) while on is true.
func (p *Proxy) HoldTagged(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdTagged = on
	p.cond.Broadcast()
}

// Tag marks a connection as tagged once one of its client frames matches.
func (p *Proxy) Tag(match func(*Frame) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tag = match
}

// DiscardRequests silently discards the client frames that match (nil
// stops it): ZooKeeper pings, say, so that only real requests keep a
// session alive.
func (p *Proxy) DiscardRequests(match func(*Frame) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filter = match
}

// Restore ends Blackhole, Stall and HalfOpen. Held data flows again;
// connections that lost data to HalfOpen are closed, since their streams
// are broken.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.hold, p.discard, p.holdReq = false, false, nil
	var broken []*pconn
	for c := range p.conns {
		c.stalled = false
		if c.discarded {
			broken = append(broken, c)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range broken {
		c.kill()
	}
}

// Reset closes every connection; new ones are accepted as usual.
func (p *Proxy) Reset() {
	p.mu.Lock()
	all := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.kill()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.hold, p.discard = false, false
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

// Drop is an armed DropReply.
type Drop struct {
	match     func(*Frame) bool
	holdAfter bool
	fired     chan DropEvent
}

// DropEvent says which request had its reply dropped, and when.
type DropEvent struct {
	Request Frame
	Reply   Frame
}

// Fired receives one event when the drop has happened.
func (d *Drop) Fired() <-chan DropEvent { return d.fired }

// DropReply arms a one-shot fault: the next client request that matches is
// forwarded; its reply is discarded and the connection closed (with a FIN,
// so that clients treat it as a broken connection and retry). With
// holdAfter, every later request that matches (the client's retries) waits
// in the proxy until Restore, while other traffic (a new connection's
// handshake) flows.
func (p *Proxy) DropReply(match func(*Frame) bool, holdAfter bool) *Drop {
	d := &Drop{match: match, holdAfter: holdAfter, fired: make(chan DropEvent, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops = append(p.drops, d)
	return d
}

// Disarm removes d if it has not fired.
func (p *Proxy) Disarm(d *Drop) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.drops {
		if x == d {
			p.drops = append(p.drops[:i], p.drops[i+1:]...)
			return
		}
	}
}

// Observer receives copies of the frames that match its predicate. It never
// slows the proxy down: when C is full, frames are not delivered and
// Missed counts them.
type Observer struct {
	p      *Proxy
	match  func(*Frame) bool
	C      chan Frame
	missed atomic.Int64
}

// Observe starts delivering matching frames (both directions) on the
// returned Observer's channel.
func (p *Proxy) Observe(match func(*Frame) bool) *Observer {
	o := &Observer{p: p, match: match, C: make(chan Frame, 4096)}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observers[o] = struct{}{}
	return o
}

// Stop ends delivery.
func (o *Observer) Stop() {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	delete(o.p.observers, o)
}

// Missed counts frames that did not fit in C.
func (o *Observer) Missed() int64 { return o.missed.Load() }

// pconn is one proxied connection.
type pconn struct {
	id             uint64
	p              *Proxy
	client, server net.Conn
	dead           chan struct{}
	once           sync.Once

	// Guarded by p.mu:
	tagged    bool
	discarded bool
	stalled   bool // Stall
	isDead    bool
	ups       int          // client frames seen
	replies   int          // server replies seen (RESP: not counting pushes)
	pending   []pendingReq // requests whose replies must be dropped
}

type pendingReq struct {
	d   *Drop
	req Frame
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.nextID++
		pc := &pconn{id: p.nextID, p: p, client: c, server: s, dead: make(chan struct{})}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		up := make(chan Frame, 1024)
		down := make(chan Frame, 1024)
		var writers sync.WaitGroup
		writers.Add(2)
		p.wg.Add(5)
		go func() { defer p.wg.Done(); pc.read(true, up) }()
		go func() { defer p.wg.Done(); pc.read(false, down) }()
		go func() { defer p.wg.Done(); defer writers.Done(); pc.write(true, up) }()
		go func() { defer p.wg.Done(); defer writers.Done(); pc.write(false, down) }()
		go func() { defer p.wg.Done(); writers.Wait(); pc.kill() }()
	}
}

// kill closes both sides at once, dropping queued frames.
func (c *pconn) kill() {
	c.once.Do(func() {
		c.p.mu.Lock()
		c.isDead = true
		delete(c.p.conns, c)
		c.p.cond.Broadcast()
		c.p.mu.Unlock()
		close(c.dead)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// read cuts one direction into frames and queues those to forward. When the
// source ends it closes q, so that the writer delivers what is queued and
// then half-closes the destination.
func (c *pconn) read(up bool, q chan<- Frame) {
	defer close(q)
	src := c.server
	if up {
		src = c.client
	}
	p := c.p
	var buf []byte
	chunk := make([]byte, 32<<10)
	index := 0
	for {
		n, err := src.Read(chunk)
		if n > 0 {
			buf = append(buf, chunk[:n]...)
			for len(buf) > 0 {
				l := frameLen(p.proto, buf)
				if l == 0 {
					break
				}
				if l < 0 {
					l = len(buf) // cannot parse: pass it through as is
				}
				f := Frame{Up: up, Conn: c.id, At: p.now(), Data: append([]byte(nil), buf[:l]...)}
				decode(p.proto, &f, index)
				index++
				buf = append(buf[:0:0], buf[l:]...)
				forward, kill := c.onFrame(&f)
				if kill {
					c.kill()
					return
				}
				if forward {
					select {
					case q <- f:
					case <-c.dead:
						return
					}
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// onFrame applies the armed faults to a frame just read.
func (c *pconn) onFrame(f *Frame) (forward, kill bool) {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	counted := f.Up || !(f.Handshake || f.Push)
	if f.Up {
		f.Index = c.ups
		c.ups++
	} else if counted {
		f.Index = c.replies
		c.replies++
	}
	for o := range p.observers {
		if o.match(f) {
			select {
			case o.C <- *f:
			default:
				o.missed.Add(1)
			}
		}
	}
	if p.discard {
		c.discarded = true
		return false, false
	}
	if f.Up {
		if p.tag != nil && !c.tagged && p.tag(f) {
			c.tagged = true
		}
		if f.Handshake {
			return true, false
		}
		if p.filter != nil && p.filter(f) {
			return false, false
		}
		for i, d := range p.drops {
			if d.match(f) {
				p.drops = append(p.drops[:i], p.drops[i+1:]...)
				c.pending = append(c.pending, pendingReq{d: d, req: *f})
				break
			}
		}
		return true, false
	}
	if !counted {
		return true, false
	}
	for i, pr := range c.pending {
		var match bool
		switch p.proto {
		case ZooKeeper:
			match = zkAnswers(&pr.req, f)
		case RESP:
			// Every client frame of a RESP connection is a request with
			// one reply, in order.
			match = pr.req.Index == f.Index
		default:
			match = true
		}
		if match {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			if p.proto == RESP && bytes.HasPrefix(f.Data, []byte("-NOSCRIPT")) {
				// The server did not act: the client sends the script
				// itself next. Wait for a request that does act.
				p.drops = append(p.drops, pr.d)
				return true, false
			}
			if pr.d.holdAfter {
				p.holdReq = pr.d.match
			}
			pr.d.fired <- DropEvent{Request: pr.req, Reply: *f}
			return false, true
		}
	}
	return true, false
}

func (p *Proxy) holding(c *pconn, f *Frame) bool {
	return p.hold || c.stalled || (p.holdTagged && c.tagged) || (f.Up && p.holdReq != nil && p.holdReq(f))
}

// write delivers queued frames, after the latency, while not held.
func (c *pconn) write(up bool, q <-chan Frame) {
	dst := c.client
	if up {
		dst = c.server
	}
	p := c.p
	for f := range q {
		p.mu.Lock()
		for p.holding(c, &f) && !c.isDead && !p.closed {
			p.cond.Wait()
		}
		lat := p.latDown
		if up {
			lat = p.latUp
		}
		dead := c.isDead
		p.mu.Unlock()
		if dead {
			return
		}
		if wait := time.Duration(f.At + int64(lat) - p.now()); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.dead:
				t.Stop()
				return
			}
		}
		if up {
			// Before the write: the server may answer, and the test read
			// LastUp, before this goroutine runs again after it.
			p.lastUp.Store(p.now())
		}
		if _, err := dst.Write(f.Data); err != nil {
			c.kill()
			return
		}
	}
	// The source ended: let the destination see the end too, after the
	// data. A half-close lets a server still act on a request that a
	// client sent just before it went away.
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}
