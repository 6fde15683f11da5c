package etcddlock_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// counter sits in a real etcd client's gRPC stack: it counts what the
// client sends (unary calls by method, watch creates and cancels, lease
// keep-alives), records the delete events it receives, and can drop the
// reply of a Txn that the server executed, as a broken connection would.
type counter struct {
	mu       sync.Mutex
	changed  *sync.Cond // broadcast on every change
	sent     map[string]int
	created  int // watch-created responses received
	deletes  []deleteEvent
	puts     []deleteEvent                              // put events received (release markers)
	dropNext func(*pb.TxnRequest, *pb.TxnResponse) bool // drop the reply of the next Txn it matches, once
	dropped  *pb.TxnRequest                             // the last Txn whose reply was dropped, for a replay
	// holdRetry, if set when a reply is dropped, holds the next Txn (the
	// retry) until it is closed.
	holdRetry chan struct{}
	held      chan struct{} // holdRetry, armed by a drop; guarded by mu

	// holdRead, if set, holds the next read of a queue (a Range over a
	// range of keys) until it is closed; readHeld is closed when that
	// read is held.
	holdRead, readHeld chan struct{}

	// holdTxn, if set, holds the next Txn it matches until holdTxnRelease
	// is closed; txnHeld is closed when that Txn is held.
	holdTxn                 func(*pb.TxnRequest) bool
	holdTxnRelease, txnHeld chan struct{}

	watched  []string // the keys of the watches created, in order
	txnSizes []int    // the encoded size of each Txn sent, in order

	// refuse[m] is how many more calls of gRPC method m to answer with
	// refuseErr without sending them, as a server refusing them would.
	// Each is counted under m and under "refused "+m.
	refuse    map[string]int
	refuseErr error
}

// holdNextTxn holds the next Txn that match matches, before it is sent,
// until release is closed, and returns a channel closed once it is held.
func (c *counter) holdNextTxn(match func(*pb.TxnRequest) bool, release chan struct{}) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdTxn, c.holdTxnRelease, c.txnHeld = match, release, make(chan struct{})
	return c.txnHeld
}

// watchedKeys returns the keys of the watches the client created.
func (c *counter) watchedKeys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.watched)
}

// takeTxnSizes returns the encoded sizes of the Txns sent since the last
// call, in order.
func (c *counter) takeTxnSizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	sizes := c.txnSizes
	c.txnSizes = nil
	return sizes
}

// holdNextRead holds the next read of a queue until release is closed,
// and returns a channel closed once it is held.
func (c *counter) holdNextRead(release chan struct{}) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdRead, c.readHeld = release, make(chan struct{})
	return c.readHeld
}

// refuseNext makes the next n calls of method fail with err, unsent.
func (c *counter) refuseNext(method string, n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse == nil {
		c.refuse = map[string]int{}
	}
	c.refuse[method] = n
	c.refuseErr = err
}

// dropNextReply makes the client drop the reply of the next Txn that match
// matches, once.
func (c *counter) dropNextReply(match func(*pb.TxnRequest, *pb.TxnResponse) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropNext = match
}

// cloneTxn copies a Txn deeply: the driver may reuse parts of a request
// for its next one.
func cloneTxn(txn *pb.TxnRequest) *pb.TxnRequest { return proto.Clone(txn).(*pb.TxnRequest) }

// replayDropped sends again, through admin, the last Txn whose reply the
// client lost, as a copy of the request that etcd applies late would be,
// and checks that it creates nothing: it fails its comparisons, or finds
// its lease gone.
func (c *counter) replayDropped(t *testing.T, ctx context.Context, admin *clientv3.Client) {
	t.Helper()
	c.mu.Lock()
	req := c.dropped
	c.mu.Unlock()
	if req == nil {
		t.Fatal("no reply was dropped")
	}
	resp, err := pb.NewKVClient(admin.ActiveConnection()).Txn(ctx, req)
	switch {
	case err != nil && status.Code(err) == codes.NotFound:
		// "requested lease not found"
	case err != nil:
		t.Fatalf("replay of the lost Txn: %v", err)
	case resp.Succeeded:
		t.Error("a late copy of the lost Txn succeeded: it created the entry again, an orphan")
	}
}

// refused reports whether to refuse a call of method, counting it if so.
func (c *counter) refused(method string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse[method] == 0 {
		return nil
	}
	c.refuse[method]--
	c.sent["refused "+method]++
	c.changed.Broadcast()
	return c.refuseErr
}

// waitSent waits until the client has sent n requests of what since the
// last take.
func (c *counter) waitSent(t testing.TB, ctx context.Context, what string, n int) {
	t.Helper()
	if got := c.sentAtLeast(ctx, what, n); got < n {
		t.Fatalf("%d %q sent, want %d (watchdog)", got, what, n)
	}
}

// sentAtLeast waits until the client has sent n requests of what since the
// last take, or ctx ends, and returns how many it sent.
func (c *counter) sentAtLeast(ctx context.Context, what string, n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waitLocked(ctx, func() bool { return c.sent[what] >= n })
	return c.sent[what]
}

// waitLocked waits, with c.mu held, until done reports true or ctx ends.
// done is called with c.mu held.
func (c *counter) waitLocked(ctx context.Context, done func() bool) {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.changed.Broadcast()
	})
	defer stop()
	for !done() && ctx.Err() == nil {
		c.changed.Wait()
	}
}

// deleteEvent is a delete (or put) notice received on a watch.
type deleteEvent struct {
	key       string
	modRev    int64 // revision of the delete
	headerRev int64 // revision in the response header
}

func newCounter() *counter {
	c := &counter{sent: map[string]int{}}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// createdCount returns how many watches of the client have been created.
func (c *counter) createdCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created
}

// waitCreated waits until n watches of the client have been created,
// counting the driver's own (so one more than the waits).
func (c *counter) waitCreated(t testing.TB, ctx context.Context, n int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waitLocked(ctx, func() bool { return c.created >= n })
	if c.created < n {
		t.Fatalf("%d watches created, want %d (watchdog)", c.created, n)
	}
}

// client returns an etcddlock client whose etcd client goes through c.
func (c *counter) client(t *testing.T, ctx context.Context, addr string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return c.clientB(t, ctx, addr, opts...)
}

func (c *counter) clientB(t testing.TB, ctx context.Context, addr string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	dc, err := etcddlock.New(ctx, c.etcdClient(t, addr), &etcddlock.Options{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dc.Close() })
	// The driver holds one watch open for its lifetime (see
	// keepWatchStream): count from when it exists.
	c.waitCreated(t, ctx, 1)
	c.take()
	return dc
}

// etcdClient returns an etcd client of the server at addr whose requests
// and watch events c counts, closed when the test ends.
func (c *counter) etcdClient(t testing.TB, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{addr},
		Logger:    zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(c.unary),
			grpc.WithChainStreamInterceptor(c.stream),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// countedHolder takes key with a client of its own of the server at addr,
// whose counts then start afresh: c counts what the client sends after
// the grant.
func countedHolder(t *testing.T, ctx context.Context, addr, key string) (c *counter, client *dlock.Client, l *dlock.Lease) {
	t.Helper()
	c = newCounter()
	client = c.client(t, ctx, addr, longTTL)
	l, err := client.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c.take()
	c.takeTxnSizes()
	return c, client, l
}

func (c *counter) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent[what]++
	c.changed.Broadcast()
}

// take returns the counts and delete events since the last take.
func (c *counter) take() (map[string]int, []deleteEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent, dels := c.sent, c.deletes
	c.sent, c.deletes, c.puts = map[string]int{}, nil, nil
	return sent, dels
}

// putEvents returns the put events received since the last take.
func (c *counter) putEvents() []deleteEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.puts)
}

// takeAll takes the counts of several counters: the messages sent in all,
// and their sum by kind.
func takeAll(counters []*counter) (int, map[string]int) {
	sent, by := 0, map[string]int{}
	for _, c := range counters {
		s, _ := c.take()
		sent += total(s)
		for k, v := range s {
			by[k] += v
		}
	}
	return sent, by
}

// total is the number of messages sent: not the refused ones (counted
// twice) nor the count of dropped replies.
func total(sent map[string]int) int {
	n := 0
	for k, v := range sent {
		if k != "dropped" && !strings.HasPrefix(k, "refused ") {
			n += v
		}
	}
	return n
}

// How the counter names a Range over a range of keys (a read of a queue),
// to tell it from a Range of one key (rangeMethod), and a Txn that only
// reads (a waiter's check at a renewal), to tell it from one that writes
// (txnMethod).
const (
	rangeMethod = "/etcdserverpb.KV/Range"
	queueRead   = rangeMethod + " (queue)"
	readTxn     = "/etcdserverpb.KV/Txn (read)"
)

func (c *counter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	label := method
	switch r := req.(type) {
	case *pb.RangeRequest:
		if len(r.RangeEnd) > 0 {
			label = queueRead
		}
	case *pb.TxnRequest:
		if len(r.Compare) == 0 && !slices.ContainsFunc(r.Success, func(op *pb.RequestOp) bool { return op.GetRequestRange() == nil }) {
			label = readTxn
		}
	}
	c.add(label)
	if err := c.refused(method); err != nil {
		return err
	}
	if label == queueRead {
		c.mu.Lock()
		hold, held := c.holdRead, c.readHeld
		c.holdRead = nil
		c.mu.Unlock()
		if hold != nil {
			close(held)
			<-hold
		}
	}
	txn, isTxn := req.(*pb.TxnRequest)
	if isTxn {
		c.mu.Lock()
		c.txnSizes = append(c.txnSizes, proto.Size(txn))
		held := c.held
		c.held = nil
		var release, txnHeld chan struct{}
		if c.holdTxn != nil && c.holdTxn(txn) {
			release, txnHeld, c.holdTxn = c.holdTxnRelease, c.txnHeld, nil
		}
		c.mu.Unlock()
		if held != nil {
			<-held
		}
		if release != nil {
			close(txnHeld)
			<-release
		}
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if isTxn && err == nil {
		c.mu.Lock()
		drop := c.dropNext != nil && c.dropNext(txn, reply.(*pb.TxnResponse))
		if drop {
			c.dropNext = nil
			c.dropped = cloneTxn(txn)
			c.held = c.holdRetry
			c.sent["dropped"]++
			c.changed.Broadcast()
		}
		c.mu.Unlock()
		if drop {
			return status.Error(codes.Unavailable, "test: reply lost")
		}
	}
	return err
}

func (c *counter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	// etcd's client opens a stream for each KeepAliveOnce: refusing the
	// stream refuses that keep-alive.
	if err := c.refused(method); err != nil {
		return nil, err
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: cs, c: c}, nil
}

type countedStream struct {
	grpc.ClientStream
	c *counter
}

func (s *countedStream) SendMsg(m any) error {
	switch r := m.(type) {
	case *pb.WatchRequest:
		switch {
		case r.GetCreateRequest() != nil:
			s.c.mu.Lock()
			s.c.watched = append(s.c.watched, string(r.GetCreateRequest().Key))
			s.c.mu.Unlock()
			s.c.add("watch create")
		case r.GetCancelRequest() != nil:
			s.c.add("watch cancel")
		default:
			s.c.add("watch other")
		}
	case *pb.LeaseKeepAliveRequest:
		s.c.add("keep-alive")
	}
	return s.ClientStream.SendMsg(m)
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if wr, ok := m.(*pb.WatchResponse); ok && err == nil {
		s.c.mu.Lock()
		if wr.Created {
			s.c.created++
		}
		for _, ev := range wr.Events {
			e := deleteEvent{string(ev.Kv.Key), ev.Kv.ModRevision, wr.Header.Revision}
			if ev.Type == mvccpb.DELETE {
				s.c.deletes = append(s.c.deletes, e)
			} else {
				s.c.puts = append(s.c.puts, e)
			}
		}
		s.c.changed.Broadcast()
		s.c.mu.Unlock()
	}
	return err
}

// putApplied matches a Txn that put a key: created an entry (where the
// comparisons let it: a join behind a lone holder, which finds no tail,
// creates nothing; the Txn after it does), or proclaimed one.
func putApplied(_ *pb.TxnRequest, resp *pb.TxnResponse) bool {
	for _, op := range resp.Responses {
		if op.GetResponsePut() != nil || op.GetResponseTxn() != nil && putApplied(nil, op.GetResponseTxn()) {
			return true
		}
	}
	return false
}

// isBehindTxn matches the Txn of a join that found no tail (stepBehind): it
// compares an entry other than its own (the witness), and checks, in a
// nested Txn with no operations, that no key was created since its read.
func isBehindTxn(txn *pb.TxnRequest) bool {
	return slices.ContainsFunc(txn.Success, func(op *pb.RequestOp) bool {
		in := op.GetRequestTxn()
		return in != nil && len(in.Success) == 0 && len(in.Failure) == 0
	})
}
