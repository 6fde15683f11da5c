package redisdlock_test

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// replyDropper is a loopback TCP proxy to a Redis server that, once armed,
// lets the next EVALSHA through to the server and then closes the
// connection in place of its reply: the lost reply of a write the server
// has run. go-redis sees io.EOF, which it retries. Armed with dropRequest
// instead, it closes the connection in place of forwarding the next
// EVALSHA: a write lost before the server saw it. With a hold in next, the
// EVALSHA after the dropped one (go-redis' retry, on a new connection) waits
// at the proxy until the test releases it.
type replyDropper struct {
	ln          net.Listener
	target      string
	armed       atomic.Bool          // drop the reply of the next EVALSHA
	dropRequest atomic.Bool          // drop the next EVALSHA itself
	next        atomic.Pointer[hold] // becomes held when something is dropped
	held        atomic.Pointer[hold] // holds the next EVALSHA
	wg          sync.WaitGroup
}

// hold keeps one EVALSHA at the proxy: arrived is closed when it gets
// there, and it goes on to the server once let is called.
type hold struct {
	arrived, release chan struct{}
	once             sync.Once
}

func (h *hold) let() { h.once.Do(func() { close(h.release) }) }

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

// dropped arms the hold for the retry of what was just dropped. It runs
// before the proxy closes the connection, so before go-redis can retry.
func (p *replyDropper) dropped() { p.held.Store(p.next.Swap(nil)) }

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
				if !bytes.Contains(bytes.ToLower(b), []byte("evalsha")) {
					return true
				}
				if p.dropRequest.CompareAndSwap(true, false) {
					p.dropped()
					return false // the server never sees it
				}
				if h := p.held.Swap(nil); h != nil {
					close(h.arrived)
					<-h.release
				}
				sent.Store(true)
				return true
			})
		})
		p.wg.Go(func() {
			pipe(client, server, func([]byte) bool {
				if sent.Load() && p.armed.CompareAndSwap(true, false) {
					p.dropped()
					return false // the reply is lost
				}
				return true
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

// proxied returns a client through p with go-redis' default retries, and
// a fence of name on it after one write through it, so that the script is
// loaded and the next fenced write is an EVALSHA the server runs, not a
// NOSCRIPT. The read timeout is long, so that a retry held at the proxy is
// not also timed out and retried once more.
func proxied(t *testing.T, p *replyDropper, name string, maxRetries int) *redisdlock.Fence {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: maxRetries, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	f := redisdlock.NewFence(rdb, name)
	if err := f.Set(testCtx(t), 1, name+":warm", "x", 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// stageRetry runs write through p with the reply of its EVALSHA dropped
// (or, with lostRequest, the EVALSHA itself), holds go-redis' retry at the
// proxy while between runs, then lets it through and returns write's
// error. No sleeps: each step waits for the one before.
func stageRetry(t *testing.T, p *replyDropper, lostRequest bool, write func() error, between func()) error {
	t.Helper()
	h := &hold{arrived: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.let)
	p.next.Store(h)
	if lostRequest {
		p.dropRequest.Store(true)
	} else {
		p.armed.Store(true)
	}
	done := make(chan error, 1)
	go func() { done <- write() }()
	select {
	case <-h.arrived:
	case err := <-done:
		t.Fatalf("the write returned %v before its retry reached the proxy", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no retry reached the proxy within 30 s")
	}
	between()
	h.let()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the write did not return within 30 s of its retry's release")
	}
	return nil
}

// A fenced write whose reply is lost has run on the server, and go-redis
// retries it (EVALSHA after io.EOF) in the same call, with the same write
// id: the fence finds the id recorded and runs nothing. INCR counts once
// and the caller learns that it was applied (ErrReplyLost); Set, whose
// reply says nothing, returns nil. With MaxRetries -1 there is no retry
// and the caller sees the network error. Without write ids (a fence.lua of
// the token alone) the INCR with go-redis' retries would count 2 and
// return nil. (The NOSCRIPT fallback of Script.Run is no
// such retry: the server answers NOSCRIPT without running anything.)
func TestFence_lostReply_appliedOnce(t *testing.T) {
	ctx, direct := fenceRig(t)
	p := newReplyDropper(t, direct.Options().Addr)
	for _, c := range []struct {
		name       string
		maxRetries int
		want       error
	}{
		{"go-redis retries", 0, redisdlock.ErrReplyLost}, // 0: go-redis' default, 3 retries
		{"no retries", -1, dlock.ErrUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "{retry:" + strconv.Itoa(c.maxRetries) + "}"
			f := proxied(t, p, name, c.maxRetries)
			key := name + ":count"
			p.armed.Store(true)
			_, err := f.Do(ctx, 1, "INCR", key)
			if p.armed.Load() {
				t.Fatal("no reply was dropped")
			}
			if !errors.Is(err, c.want) || errors.Is(err, dlock.ErrStaleToken) ||
				(c.want != redisdlock.ErrReplyLost && errors.Is(err, redisdlock.ErrReplyLost)) {
				t.Errorf("INCR with its reply lost: err = %v, want %v", err, c.want)
			}
			t.Logf("INCR with its reply lost: %v", err)
			if got := get(t, ctx, direct, key); got != "1" {
				t.Errorf("count %s after one fenced INCR whose reply was lost, want 1", got)
			}
		})
	}
	t.Run("Set", func(t *testing.T) {
		f := proxied(t, p, "{retry:set}", 0)
		p.armed.Store(true)
		if err := f.Set(ctx, 1, "{retry:set}:k", "v", 0); err != nil || p.armed.Load() {
			t.Fatalf("Set with its reply lost: err = %v (reply dropped: %v), want nil", err, !p.armed.Load())
		}
		if got := get(t, ctx, direct, "{retry:set}:k"); got != "v" {
			t.Fatalf("data %q, want v", got)
		}
	})
}

// A write applied, its reply lost, and a newer holder's write landing
// before go-redis' retry reaches the server: the retry is recognized by
// its id, which the fence checks before the tokens, and reported applied
// (ErrReplyLost), not stale — it did land, before the newer write. A
// fence that remembered only the last write's id (or none) would report it
// stale here. The counts say what ran: once each.
func TestFence_lostReply_retryAfterNewerHolder(t *testing.T) {
	ctx, direct := fenceRig(t)
	p := newReplyDropper(t, direct.Options().Addr)
	a := proxied(t, p, "{newer}", 0)
	b := redisdlock.NewFence(direct, "{newer}")
	err := stageRetry(t, p, false,
		func() error { _, err := a.Do(ctx, 1, "INCR", "{newer}:count"); return err },
		func() {
			if _, err := b.Do(ctx, 2, "INCR", "{newer}:count"); err != nil {
				t.Errorf("newer holder's INCR: %v", err)
			}
		})
	if !errors.Is(err, redisdlock.ErrReplyLost) || errors.Is(err, dlock.ErrStaleToken) {
		t.Errorf("A's INCR, applied, reply lost, retried after B's write: err = %v, want ErrReplyLost", err)
	}
	if got := get(t, ctx, direct, "{newer}:count"); got != "2" {
		t.Errorf("count %s, want 2 (A's INCR and B's, once each)", got)
	}
	if rec := recordToken(t, ctx, direct, b); rec != "2" {
		t.Errorf("record's token %s, want 2", rec)
	}
}

// A write lost on its way (the server never ran it) and retried after a
// newer holder's write: its id is not recorded, so it is judged on its
// token, and refused as stale — write ids do not let an unapplied stale
// write through.
func TestFence_lostRequest_retryAfterNewerHolder_stale(t *testing.T) {
	ctx, direct := fenceRig(t)
	p := newReplyDropper(t, direct.Options().Addr)
	a := proxied(t, p, "{lost}", 0)
	b := redisdlock.NewFence(direct, "{lost}")
	err := stageRetry(t, p, true,
		func() error { _, err := a.Do(ctx, 1, "INCR", "{lost}:count"); return err },
		func() {
			if _, err := b.Do(ctx, 2, "INCR", "{lost}:count"); err != nil {
				t.Errorf("newer holder's INCR: %v", err)
			}
		})
	wantStale(t, err, "{lost}", 1, 2)
	if got := get(t, ctx, direct, "{lost}:count"); got != "1" {
		t.Errorf("count %s, want 1 (B's INCR only)", got)
	}
}

// The record keeps the ids of the last 8 writes applied (fence.lua's
// recentWrites). A retry that finds its id among them is recognized after
// 7 other writes of the fence; after 8 its id is gone and it is judged
// anew, as without write ids: here (the others have the same token, as
// other goroutines of the same holder) it runs a second time. This pins
// the residual case docs/fencing.md, section Redis states.
func TestFence_lostReply_recentWrites(t *testing.T) {
	ctx, direct := fenceRig(t)
	p := newReplyDropper(t, direct.Options().Addr)
	for _, c := range []struct {
		others int
		want   error
		count  string
	}{
		{7, redisdlock.ErrReplyLost, "8"}, // applied once, recognized
		{8, nil, "10"},                    // applied twice: the residual case
	} {
		t.Run(strconv.Itoa(c.others), func(t *testing.T) {
			name := "{recent:" + strconv.Itoa(c.others) + "}"
			a := proxied(t, p, name, 0)
			same := redisdlock.NewFence(direct, name)
			key := name + ":count"
			err := stageRetry(t, p, false,
				func() error { _, err := a.Do(ctx, 1, "INCR", key); return err },
				func() {
					for range c.others {
						if _, err := same.Do(ctx, 1, "INCR", key); err != nil {
							t.Errorf("other INCR: %v", err)
						}
					}
				})
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Errorf("retry after %d other writes: err = %v, want %v", c.others, err, c.want)
			}
			if got := get(t, ctx, direct, key); got != c.count {
				t.Errorf("count %s, want %s", got, c.count)
			}
		})
	}
}
