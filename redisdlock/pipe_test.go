package redisdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// pipeRig is a server of its own, an admin connection to it, and a Client
// whose driver the test can look into (redisdlock.PipeStateForTest).
type pipeRig struct {
	ctx     context.Context
	admin   *redis.Client   // a single server's
	servers []*redis.Client // every master's, to pause them
	held    func(t *testing.T, key string) bool
	d       driver.Driver
	c       *dlock.Client
}

func newPipeRig(t *testing.T, opts *redisdlock.Options) *pipeRig {
	t.Helper()
	srv := testserver.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	// Calls wait on a paused server: a read timeout of go-redis's default
	// (3 s) must not end them, their contexts do.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newPipeRigOn(t, rdb, []*redis.Client{admin}, opts)
	r.admin = admin
	return r
}

// newPipeRigOn is newPipeRig on rdb, whose masters servers are.
func newPipeRigOn(t *testing.T, rdb redis.UniversalClient, servers []*redis.Client, opts *redisdlock.Options) *pipeRig {
	t.Helper()
	ctx := testCtx(t)
	d, err := redisdlock.NewDriverForTest(ctx, rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// The scripts loaded.
	if l, err := c.Lock(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := &pipeRig{ctx: ctx, servers: servers, d: d, c: c}
	r.held = func(t *testing.T, key string) bool {
		t.Helper()
		n, err := rdb.Exists(ctx, redisdlock.RedisKeyForTest("dlock:", key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	return r
}

// pause holds every script call (they may write) on the server until
// unpause: calls sent meanwhile stay on the wire.
func (r *pipeRig) pause(t *testing.T) {
	t.Helper()
	for _, s := range r.servers {
		if err := s.Do(r.ctx, "client", "pause", 60000, "write").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Do(context.Background(), "client", "unpause").Err() })
	}
}

func (r *pipeRig) unpause(t *testing.T) {
	t.Helper()
	for _, s := range r.servers {
		if err := s.Do(r.ctx, "client", "unpause").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitPipe waits until the pipe's state satisfies ok.
func (r *pipeRig) waitPipe(t *testing.T, what string, ok func(flights, queued, onWire int) bool) {
	t.Helper()
	for {
		f, q, w := redisdlock.PipeStateForTest(r.d)
		if ok(f, q, w) {
			return
		}
		select {
		case <-r.ctx.Done():
			t.Fatalf("pipe: %d flights, %d queued, %d in pipelines on the wire; want %s (watchdog)", f, q, w, what)
		case <-time.After(time.Millisecond):
		}
	}
}

// lockResult is one Lock's outcome.
type lockResult struct {
	key string
	l   *dlock.Lease
	err error
}

// lockAsync starts Lock(ctx, key) and returns where its outcome arrives.
func (r *pipeRig) lockAsync(ctx context.Context, key string) <-chan lockResult {
	out := make(chan lockResult, 1)
	go func() {
		l, err := r.c.Lock(ctx, key)
		out <- lockResult{key, l, err}
	}()
	return out
}

// result waits for one outcome.
func (r *pipeRig) result(t *testing.T, ch <-chan lockResult) lockResult {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-r.ctx.Done():
		t.Fatal("a Lock did not return (watchdog)")
		return lockResult{}
	}
}

// stat returns a field of INFO stats.
func (r *pipeRig) stat(t *testing.T, field string) int64 {
	t.Helper()
	s, err := r.admin.Info(r.ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO stats", field)
	return 0
}

// fillFlights starts as many Locks as the pipe has flights, which the
// paused server holds, and returns their outcomes.
func (r *pipeRig) fillFlights(t *testing.T, prefix string) []<-chan lockResult {
	t.Helper()
	var out []<-chan lockResult
	n := redisdlock.PipeFlightsForTest
	for i := range n {
		out = append(out, r.lockAsync(r.ctx, fmt.Sprintf("%s-%d", prefix, i)))
	}
	r.waitPipe(t, fmt.Sprintf("%d flights", n), func(f, _, _ int) bool { return f == n })
	return out
}

// Calls that overlap share requests: with every flight on the wire, eight
// more Locks wait in the queue and then go to the server as one pipeline,
// one read of the server's instead of eight. An error (a key of the wrong
// type) reaches its own call only.
func TestPipe_overlappingCallsShareOneRead(t *testing.T) {
	r := newPipeRig(t, nil)
	// The first round dials the connections that the second reuses: a new
	// connection's handshake takes reads of its own.
	r.overlappingLocks(t, "warm")
	// The admin's PAUSE, UNPAUSE and INFO; the first Locks, one a flight; one
	// pipeline for the other eight (sent alone: eight); the failed Lock's
	// cleanup (abandon's release).
	reads := r.overlappingLocks(t, "measured")
	if most := int64(3 + redisdlock.PipeFlightsForTest + 1 + 1); reads > most {
		t.Errorf("the server read %d times for %d overlapping Locks, want at most %d: the queued calls were not pipelined", reads, redisdlock.PipeFlightsForTest+8, most)
	}
}

// overlappingLocks runs Locks on keys named after prefix, one on each of
// the pipe's flights and eight in the queue, one of them on a key of the wrong type,
// and checks each outcome. It returns the server's reads from the pause
// to the last outcome.
func (r *pipeRig) overlappingLocks(t *testing.T, prefix string) int64 {
	t.Helper()
	bad := prefix + "-wrong-type"
	if err := r.admin.Set(r.ctx, redisdlock.RedisKeyForTest("dlock:", bad), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	readsBefore := r.stat(t, "total_reads_processed")
	r.pause(t)
	chans := r.fillFlights(t, prefix+"-first")
	keys := []string{bad}
	for i := range 7 {
		keys = append(keys, fmt.Sprintf("%s-queued-%d", prefix, i))
	}
	for _, k := range keys {
		chans = append(chans, r.lockAsync(r.ctx, k))
	}
	r.waitPipe(t, "8 queued", func(_, q, _ int) bool { return q == len(keys) })
	r.unpause(t)
	var results []lockResult
	for _, ch := range chans {
		results = append(results, r.result(t, ch))
	}
	reads := r.stat(t, "total_reads_processed") - readsBefore
	for _, res := range results {
		switch {
		case res.key == bad && res.err == nil:
			t.Errorf("Lock(%q) of a key of another type succeeded", res.key)
		case res.key == bad && !strings.Contains(res.err.Error(), "WRONGTYPE"):
			t.Errorf("Lock(%q): %v, want the server's WRONGTYPE", res.key, res.err)
		case res.key != bad && res.err != nil:
			t.Errorf("Lock(%q): %v", res.key, res.err)
		case res.key != bad && !r.held(t, res.key):
			t.Errorf("Lock(%q) returned a lease, but the key is not held", res.key)
		}
	}
	return reads
}

// A script the server has not got cached (its cache flushed) is sent again
// with its source from a pipeline too, each call on its own.
func TestPipe_noScriptInPipeline(t *testing.T) {
	r := newPipeRig(t, nil)
	if err := r.admin.ScriptFlush(r.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r.queuedLocksHold(t, 6)
	if evals := commandStats(t, r.ctx, r.admin)["eval"]; evals == 0 {
		t.Error("no EVAL after SCRIPT FLUSH: the NOSCRIPT replies were not resent with the source")
	}
}

// A Lock cancelled while its call waits in the queue returns at once with
// the context's error, and its acquire never reaches the server.
func TestPipe_cancelledWhileQueuedSendsNothing(t *testing.T) {
	r := newPipeRig(t, &redisdlock.Options{WaiterTimeout: 500 * time.Millisecond})
	r.pause(t)
	first := r.fillFlights(t, "first")
	ctx, cancel := context.WithCancel(r.ctx)
	ch := r.lockAsync(ctx, "cancelled")
	r.waitPipe(t, "1 queued", func(_, q, _ int) bool { return q == 1 })
	cancel()
	if res := r.result(t, ch); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("Lock cancelled while queued: %v, want context.Canceled", res.err)
	}
	r.unpause(t)
	for _, ch := range first {
		if res := r.result(t, ch); res.err != nil {
			t.Fatalf("Lock(%q): %v", res.key, res.err)
		}
	}
	if r.held(t, "cancelled") {
		t.Error("the cancelled Lock's key is held")
	}
}

// A Lock cancelled while its call is in a pipeline on the wire returns
// with the context's error; the server then grants it the key, and the
// cleanup that follows (abandon's release) reaches the server after that
// grant, not before: the key is left free. Other calls on the key are not
// held back.
func TestPipe_cancelledOnTheWireLeavesNothingHeld(t *testing.T) {
	r := newPipeRig(t, nil)
	r.pause(t)
	first := r.fillFlights(t, "first")
	ctx, cancel := context.WithCancel(r.ctx)
	victim := r.lockAsync(ctx, "victim")
	other := r.lockAsync(r.ctx, "other")
	r.waitPipe(t, "2 queued", func(_, q, _ int) bool { return q == 2 })
	redisdlock.SendPipeQueueForTest(r.d)
	r.waitPipe(t, "the queue on the wire", func(_, q, w int) bool { return q == 0 && w == 2 })
	cancel()
	for redisdlock.PipeLeftForTest(r.d) == 0 {
		select {
		case <-r.ctx.Done():
			t.Fatal("the cancelled acquire did not leave its pipeline (watchdog)")
		case <-time.After(time.Millisecond):
		}
	}
	// The victim's cleanup (its release) waits for the pipeline, which the
	// server holds; any other call on the key goes on: it is queued.
	inspected := make(chan error, 1)
	go func() {
		_, err := r.c.Inspect(r.ctx, "victim")
		inspected <- err
	}()
	r.waitPipe(t, "the Inspect queued, the release held back", func(_, q, _ int) bool { return q == 1 })
	r.unpause(t)
	select {
	case err := <-inspected:
		if err != nil {
			t.Errorf("Inspect: %v", err)
		}
	case <-r.ctx.Done():
		t.Fatal("Inspect did not return (watchdog)")
	}
	if res := r.result(t, victim); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("Lock cancelled on the wire: %v, want context.Canceled", res.err)
	}
	for _, ch := range append(first, other) {
		if res := r.result(t, ch); res.err != nil {
			t.Fatalf("Lock(%q): %v", res.key, res.err)
		}
	}
	if r.held(t, "victim") {
		t.Error("the cancelled Lock's key is held: its release overtook its acquire")
	}
	if !r.held(t, "other") {
		t.Error("the Lock that shared the pipeline does not hold its key")
	}
}

// On a Cluster a pipeline of queued calls is split by go-redis among the
// masters of their keys' slots: each call reaches its own key's master.
func TestPipe_cluster(t *testing.T) {
	addrs := testserver.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	var servers []*redis.Client
	for _, a := range addrs {
		s := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = s.Close() })
		servers = append(servers, s)
	}
	r := newPipeRigOn(t, rdb, servers, nil)
	r.queuedLocksHold(t, 12)
}

// A renewal is never queued: with every flight stuck on the server (a
// silent connection looks the same to the client), it goes out at once on
// a connection of its own, and its lease's renewal does not wait for the
// stuck calls' deadlines.
func TestPipe_renewalNotQueued(t *testing.T) {
	r := newPipeRig(t, nil)
	g, err := r.d.Acquire(r.ctx, &driver.AcquireRequest{Key: "renewed", Owner: ownerID(), TTL: time.Minute,
		Metadata: []byte("{}"), Kind: driver.KindLock, Limit: 1, Mode: driver.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	r.pause(t)
	stuck := r.fillFlights(t, "stuck")
	renewed := make(chan error, 1)
	go func() { renewed <- g.Renew(r.ctx) }()
	// The paused server holds each write it read, its arguments kept: one
	// more such client is the renewal, sent beside the stuck calls.
	for r.heldCalls(t) < redisdlock.PipeFlightsForTest+1 {
		_, queued, _ := redisdlock.PipeStateForTest(r.d)
		if queued > 0 {
			t.Fatal("the renewal waits in the queue behind the stuck calls")
		}
		select {
		case <-r.ctx.Done():
			t.Fatal("the renewal never reached the server (watchdog)")
		case <-time.After(time.Millisecond):
		}
	}
	r.unpause(t)
	if err := <-renewed; err != nil {
		t.Fatalf("Renew: %v", err)
	}
	for _, ch := range stuck {
		if res := r.result(t, ch); res.err != nil {
			t.Fatalf("Lock(%q): %v", res.key, res.err)
		}
	}
}

// heldCalls returns how many clients of the paused server have a command
// read and held (CLIENT LIST's argv-mem above 0), this one's aside.
func (r *pipeRig) heldCalls(t *testing.T) int {
	t.Helper()
	list, err := r.admin.ClientList(r.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "cmd=client|list") {
			continue // this request's own
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "argv-mem="); ok && v != "0" {
				n++
			}
		}
	}
	return n
}

// queuedLocksHold pauses the server, fills the pipe's flights, queues n
// more Locks, and checks that each of them holds its key once the server
// answers.
func (r *pipeRig) queuedLocksHold(t *testing.T, n int) {
	t.Helper()
	r.pause(t)
	chans := r.fillFlights(t, "first")
	for i := range n {
		chans = append(chans, r.lockAsync(r.ctx, fmt.Sprintf("queued-%d", i)))
	}
	r.waitPipe(t, fmt.Sprintf("%d queued", n), func(_, q, _ int) bool { return q == n })
	r.unpause(t)
	for _, ch := range chans {
		if res := r.result(t, ch); res.err != nil {
			t.Errorf("Lock(%q): %v", res.key, res.err)
		} else if !r.held(t, res.key) {
			t.Errorf("Lock(%q) returned a lease, but the key is not held", res.key)
		}
	}
}
