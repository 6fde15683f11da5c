package redisdlock_test

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// replyDropper is a loopback TCP proxy to a Redis server that, once armed,
// lets the next EVALSHA through to the server and then closes the
// connection in place of its reply: the lost reply of a write the server
// has run. go-redis sees io.EOF, which it retries.
type replyDropper struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	wg     sync.WaitGroup
}

func newReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *replyDropper) addr() string { return p.ln.Addr().String() }

func (p *replyDropper) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		// sent is set once this connection has carried an EVALSHA: the
		// next bytes from the server are its reply (go-redis waits for
		// each reply before it sends the next command on a connection).
		var sent atomic.Bool
		p.wg.Go(func() {
			pipe(server, client, func(b []byte) bool {
				if bytes.Contains(bytes.ToLower(b), []byte("evalsha")) {
					sent.Store(true)
				}
				return true
			})
		})
		p.wg.Go(func() {
			pipe(client, server, func([]byte) bool {
				return !(sent.Load() && p.armed.CompareAndSwap(true, false)) // false: the reply is lost
			})
		})
	}
}

// pipe copies src to dst, each chunk only if pass(chunk), until
// either side ends or pass says no; then it closes both.
func pipe(dst, src net.Conn, pass func([]byte) bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !pass(buf[:n]) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A fenced write whose reply is lost has run on the server; go-redis
// retries it (EVALSHA after io.EOF), and the retry carries the same token,
// which the fence admits: the write runs twice. For SET, HSET or DEL that is
// the same data; INCR counts twice. With MaxRetries -1 the caller gets the
// error instead and the count is 1. docs/fencing-redis.md ("A lost reply")
// says so; this test pins both behaviours. (The NOSCRIPT fallback of
// Script.Run is not such a retry: the server answers NOSCRIPT without
// running anything.)
func TestFence_lostReply_retryRunsAgain(t *testing.T) {
	ctx, direct := fenceRig(t)
	p := newReplyDropper(t, direct.Options().Addr)
	for _, c := range []struct {
		name       string
		maxRetries int
		wantCount  string
		wantErr    bool
	}{
		{"go-redis retries", 0, "2", false}, // 0: go-redis' default, 3 retries
		{"no retries", -1, "1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: c.maxRetries})
			defer rdb.Close()
			f := redisdlock.NewFence(rdb, "{retry}")
			key := "{retry}:" + c.name
			// A first write loads the script, so that the armed one is
			// an EVALSHA the server runs, not a NOSCRIPT.
			if err := f.Set(ctx, 1, key+":warm", "x", 0); err != nil {
				t.Fatal(err)
			}
			p.armed.Store(true)
			_, err := f.Do(ctx, 1, "INCR", key)
			if p.armed.Load() {
				t.Fatal("no reply was dropped")
			}
			if (err != nil) != c.wantErr || errors.Is(err, dlock.ErrStaleToken) {
				t.Errorf("INCR with its reply lost: err = %v, want error %v", err, c.wantErr)
			}
			if got := get(t, ctx, direct, key); got != c.wantCount {
				t.Errorf("count %s after one fenced INCR whose reply was lost, want %s", got, c.wantCount)
			}
		})
	}
}
