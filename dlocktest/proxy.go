package dlocktest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on a loopback port that a harness puts between one
// client and the server, so that the suite can cut that client off without
// touching anybody else. It implements Link.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool                  // guarded by mu
	conns  map[net.Conn]net.Conn // client side -> server side; guarded by mu
	closed bool                  // guarded by mu
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port) and stops it when the test
// ends. Addr is where clients should connect.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dlocktest: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]net.Conn{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops all traffic through the proxy in both directions, without
// closing connections: the client sees a silent network, as in a partition
// or when the server is frozen. Data already sent waits in the proxy.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
}

// Restore lets traffic flow again after Blackhole; held data is delivered.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
	p.cond.Broadcast()
}

// Reset closes every connection through the proxy, as a server crash or a
// middlebox reset would. New connections are accepted as usual.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, s := range p.conns {
		_ = c.Close()
		_ = s.Close()
	}
	clear(p.conns)
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
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
		p.conns[c] = s
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

// pipe copies src to dst, holding data while the proxy is blackholed.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.paused && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				_ = src.Close()
			}
			_ = dst.Close()
			return
		}
	}
}
