package faultinject

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/backoff"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcd speaks gRPC over HTTP/2, which the proxy does not parse: the reply
// faults of the scenarios are injected inside the holder instead, by a gRPC
// interceptor around the real client (the pattern of bsm/redislock's
// flaky client). The request reaches etcd and is applied; the interceptor
// then throws its reply away and reports Unavailable, and later calls of
// the same method (the retries) can be held until the harness restores.
type grpcFaults struct {
	h *holder

	mu       sync.Mutex
	drop     string        // method whose next reply is dropped; guarded by mu
	holdNext bool          // hold the method's later calls once dropped; guarded by mu
	hold     string        // method whose calls wait for restore; guarded by mu
	after    string        // method whose reply was dropped: later calls are retries; guarded by mu
	restored chan struct{} // closed by restore; guarded by mu
	dropped  atomic.Int64
}

func (f *grpcFaults) arm(method string, hold bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop, f.holdNext, f.after = method, hold, ""
}

func (f *grpcFaults) restore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop, f.hold = "", ""
	if f.restored != nil {
		close(f.restored)
		f.restored = nil
	}
}

func (f *grpcFaults) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	f.mu.Lock()
	held := f.hold != "" && strings.HasSuffix(method, f.hold)
	retry := f.after != "" && strings.HasSuffix(method, f.after)
	wait := f.restored
	f.mu.Unlock()
	if held {
		// A retry, delayed in the network until the harness restores.
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if retry {
		f.h.emit(Event{Ev: "answered", At: Mono(), Err: errText(err), Kind: method})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.drop != "" && strings.HasSuffix(method, f.drop) {
		f.drop, f.after = "", method
		if f.holdNext {
			f.hold, f.restored = method, make(chan struct{})
		}
		f.dropped.Add(1)
		f.h.emit(Event{Ev: "dropped", At: Mono(), Kind: method})
		return status.Error(codes.Unavailable, "faultinject: reply dropped")
	}
	return err
}

func (h *holder) openEtcd(ctx context.Context, cfg HolderConfig) error {
	h.grpc = &grpcFaults{h: h}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Addrs,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(h.grpc.intercept)},
	})
	if err != nil {
		return err
	}
	var c *dlock.Client
	if cfg.Backend == "etcd" {
		c, err = etcddlock.New(ctx, cli, &etcddlock.Options{ClientOptions: []dlock.Option{dlock.WithTTL(cfg.TTL)}})
	} else {
		c, err = dlock.NewClient(&naiveEtcd{cli: cli}, dlock.WithTTL(cfg.TTL))
	}
	if err != nil {
		_ = cli.Close()
		return err
	}
	h.client, h.closer = c, func() { _ = cli.Close() }
	return nil
}

// NaiveEtcdPrefix starts the keys of the naive etcd recipe.
const NaiveEtcdPrefix = "naive/"

// naiveEtcd is an etcd lock written without etcd's concurrency package:
//
//   - acquire puts one key of a fixed name, with a lease, if it does not
//     exist; a retry after a lost reply finds the caller's own key and
//     reports "locked" (blocked by itself; the key is an orphan until its
//     lease expires);
//   - the token is the client's own sequence number;
//   - release deletes the key, whoever put it;
//   - renew keeps the lease alive and, when the key is gone, puts it again:
//     a silent re-acquire.
type naiveEtcd struct {
	cli *clientv3.Client
	seq atomic.Uint64
}

func (d *naiveEtcd) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	key := NaiveEtcdPrefix + req.Key
	secs := max(1, int64((req.TTL+time.Second-1)/time.Second))
	for {
		sent := time.Now()
		lease, err := d.cli.Grant(ctx, secs)
		if err != nil {
			return nil, d.err(ctx, err)
		}
		var resp *clientv3.TxnResponse
		for {
			resp, err = d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, req.Owner, clientv3.WithLease(lease.ID))).Commit()
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(10 * time.Millisecond) // retry, blindly
		}
		if err != nil {
			return nil, d.err(ctx, err)
		}
		if resp.Succeeded {
			return &naiveEtcdGrant{naiveGrant: naiveGrant{token: d.seq.Add(1), validFrom: sent, validity: time.Duration(lease.TTL) * time.Second},
				d: d, key: key, owner: req.Owner, lease: lease.ID}, nil
		}
		// The lease is left to expire: a later attempt takes a new one.
		if !req.Wait {
			return nil, fmt.Errorf("%w: naive etcd: %s exists", driver.ErrLocked, key)
		}
		if err := backoff.Sleep(ctx, 20*time.Millisecond); err != nil { // the recipe polls
			return nil, err
		}
	}
}

func (d *naiveEtcd) err(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: naive etcd: %v", driver.ErrUnavailable, err)
}

func (d *naiveEtcd) Close() error { return nil }

type naiveEtcdGrant struct {
	naiveGrant
	d          *naiveEtcd
	key, owner string
	lease      clientv3.LeaseID
}

func (g *naiveEtcdGrant) Renew(ctx context.Context) error {
	cli := g.d.cli
	if _, err := cli.KeepAliveOnce(ctx, g.lease); err != nil {
		// The lease is gone: take a new one and put the key again.
		lease, gerr := cli.Grant(ctx, int64(g.validity/time.Second))
		if gerr != nil {
			return errors.Join(err, gerr)
		}
		g.lease = lease.ID
	}
	_, err := cli.Put(ctx, g.key, g.owner, clientv3.WithLease(g.lease))
	return err
}

func (g *naiveEtcdGrant) Release(ctx context.Context) error {
	resp, err := g.d.cli.Delete(ctx, g.key)
	for err != nil && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // retry, blindly
		resp, err = g.d.cli.Delete(ctx, g.key)
	}
	if err != nil {
		return err
	}
	_, _ = g.d.cli.Revoke(ctx, g.lease)
	if resp.Deleted == 0 {
		return fmt.Errorf("%w: naive etcd: %s is gone", driver.ErrNotHeld, g.key)
	}
	return nil
}
