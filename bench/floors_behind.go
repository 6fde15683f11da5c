package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// ---- the notification floor behind another client's write ----
//
// In a contended run every release reaches the server with another
// client's durable write just ahead of it: the previous holder's re-join,
// sent the moment its own release was answered. A durable server starts an
// fsync as soon as one write is there, so the release can wait for that
// fsync and then its own. This floor times that: a third client W writes
// what a re-join writes, and the releaser starts its delete once W's
// request is on the wire (not answered). W and the releaser must be
// separate connections: on one, the server would order them itself.
//
// What could make it lower than the server allows is left out. W's
// request sent after the delete: the delete starts only once W's
// connection has written a buffer holding W's request (sentWatch); on
// loopback the bytes are then in the server's socket. W answered before
// the delete starts (the sampling goroutine late): the delete would meet
// no pending write. The server running the delete first all the same (it
// reads connections in its own order: MONITOR showed Redis run the
// release 8–11 µs before W's script, both read in one pass of its event
// loop): each sample asks the server which write came first. A sample not behind W is left out and counted
// (floorResult.Unordered).

// sentWatch tells when a request has been written to a client's
// connection: the client dials through it, and after expect the first
// Write whose buffer holds the mark closes the mark's channel once the
// Write has returned.
type sentWatch struct{ want atomic.Pointer[sentMark] }

type sentMark struct {
	mark []byte
	sent chan struct{}
}

func (sw *sentWatch) expect(mark string) *sentMark {
	m := &sentMark{mark: []byte(mark), sent: make(chan struct{})}
	sw.want.Store(m)
	return m
}

type sentConn struct {
	net.Conn
	sw *sentWatch
}

func (c sentConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if m := c.sw.want.Load(); m != nil && bytes.Contains(b[:n], m.mark) && c.sw.want.CompareAndSwap(m, nil) {
		close(m.sent)
	}
	return n, err
}

// dial is go-redis's and gRPC's dialer (gRPC gives no network: TCP).
func (sw *sentWatch) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if network == "" {
		network = "tcp"
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return sentConn{Conn: c, sw: sw}, nil
}

// errLeadUnseen is the other client's write answered with its request
// never seen written: the mark does not match what the client sends.
var errLeadUnseen = errors.New("floor: the other client's write answered but never seen on the wire")

// leadTimeout bounds the other client's write, sent and answered.
const leadTimeout = 5 * time.Second

// leadWrite starts write on a goroutine and returns once sw has seen its
// request (which holds mark) written, so that a request sent next on
// another connection reaches the server after it. wait returns write's
// answer, and inFlight false if that answer came before leadWrite returned
// (the goroutine that waits for the mark was late): the write was then no
// longer pending when the next request was sent.
func leadWrite[T any](sw *sentWatch, mark string, write func() (T, error)) (wait func() (v T, inFlight bool, err error), err error) {
	m := sw.expect(mark)
	type answer struct {
		v   T
		err error
	}
	ans := make(chan answer, 1)
	go func() {
		v, err := write()
		ans <- answer{v, err}
	}()
	select {
	case <-m.sent:
	case a := <-ans:
		// The writer's goroutine marks the request sent after its Write
		// returned: it may not have run yet.
		select {
		case <-m.sent:
		case <-time.After(time.Second):
			sw.want.CompareAndSwap(m, nil)
			if a.err != nil {
				return nil, a.err
			}
			return nil, errLeadUnseen
		}
		return func() (T, bool, error) { return a.v, false, a.err }, nil
	case <-time.After(leadTimeout):
		sw.want.CompareAndSwap(m, nil)
		return nil, errors.New("floor: the other client's write not sent within 5 s")
	}
	return func() (T, bool, error) {
		select {
		case a := <-ans:
			return a.v, true, a.err
		case <-time.After(leadTimeout):
			var zero T
			return zero, false, errors.New("floor: the other client's write not answered within 5 s")
		}
	}, nil
}

// leadFunc is notifier.lead.
type leadFunc = func(ctx context.Context) (settle func(ctx context.Context) (bool, error), err error)

// rawRedisRejoin is W's write on Redis: a small script that sets a key with
// an expiry, as a re-join's script does; it returns whether the released
// key still existed, that is whether it ran before the release.
var rawRedisRejoin = redis.NewScript(`redis.call("set", KEYS[1], ARGV[1], "px", ARGV[2]) return redis.call("exists", KEYS[2])`)

// redisLead opens W on Redis for the floor whose key is name.
func redisLead(ctx context.Context, s *servers, name string) (leadFunc, func(), error) {
	sw := &sentWatch{}
	w := redis.NewClient(&redis.Options{Addr: s.redis.addr, PoolSize: 1, Dialer: sw.dial})
	// Loaded now: a NOSCRIPT answer would send the script again behind
	// the request seen on the wire.
	if err := rawRedisRejoin.Load(ctx, w).Err(); err != nil {
		_ = w.Close()
		return nil, nil, err
	}
	wkey := name + ":w"
	lead := func(ctx context.Context) (func(context.Context) (bool, error), error) {
		wait, err := leadWrite(sw, wkey, func() (int, error) {
			return rawRedisRejoin.EvalSha(ctx, w, []string{wkey, name}, "w", 10000).Int()
		})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (bool, error) {
			existed, inFlight, err := wait()
			if err != nil {
				return false, err
			}
			return inFlight && existed == 1, w.Del(ctx, wkey).Err()
		}, nil
	}
	return lead, func() { _ = w.Close() }, nil
}

// zkLead opens W on ZooKeeper: a session of its own that creates an
// ephemeral sequential node under dir, the released node's parent, as a
// re-join does.
func zkLead(s *servers, dir string) (leadFunc, func(), error) {
	sw := &sentWatch{}
	w, err := zkConnect(s.env, 10*time.Second, zk.WithDialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return sw.dial(ctx, network, addr)
	}))
	if err != nil {
		return nil, nil, err
	}
	prefix := dir + "/w-"
	lead := func(context.Context) (func(context.Context) (bool, error), error) {
		wait, err := leadWrite(sw, prefix, func() (string, error) {
			return w.Create(prefix, nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		})
		if err != nil {
			return nil, err
		}
		return func(context.Context) (bool, error) {
			node, inFlight, err := wait()
			if err != nil {
				return false, err
			}
			_, own, err := w.Exists(node)
			if err != nil {
				return false, err
			}
			// The parent's pzxid is the zxid of the last child created or
			// deleted: the release's if it came after W's create.
			_, parent, err := w.Exists(dir)
			if err != nil {
				return false, err
			}
			return inFlight && parent.Pzxid > own.Czxid, w.Delete(node, -1)
		}, nil
	}
	return lead, w.Close, nil
}

// etcdLead opens W on etcd: a client of its own that puts a key with a
// lease under name, the released key's prefix, as a re-join does; deleted
// is the revision of the last release.
func etcdLead(ctx context.Context, s *servers, name string, deleted func() int64) (leadFunc, func(), error) {
	sw := &sentWatch{}
	w, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.env.etcdAddr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return sw.dial(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		return nil, nil, err
	}
	// Granted once, as a session's lease; long enough to need no
	// keep-alive, whose requests would be other writes.
	g, err := w.Grant(ctx, 600)
	if err != nil {
		_ = w.Close()
		return nil, nil, err
	}
	wkey := name + "/w"
	lead := func(ctx context.Context) (func(context.Context) (bool, error), error) {
		wait, err := leadWrite(sw, wkey, func() (int64, error) {
			resp, err := w.Put(ctx, wkey, "", clientv3.WithLease(g.ID))
			if err != nil {
				return 0, err
			}
			return resp.Header.Revision, nil
		})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (bool, error) {
			put, inFlight, err := wait()
			if err != nil {
				return false, err
			}
			_, err = w.Delete(ctx, wkey)
			return inFlight && put < deleted(), err
		}, nil
	}
	closeW := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = w.Revoke(ctx, g.ID)
		_ = w.Close()
	}
	return lead, closeW, nil
}
