package etcddlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// readHeldKV is a real etcd KV whose reads of keys under prefix (the
// queue), Range or read-only Txn, wait until their context ends, and are
// then sent with that ended context: the call is cancelled while its read
// is in flight, and etcd's client returns what it returns for that.
type readHeldKV struct {
	clientv3.KV
	prefix string
	inRead chan struct{} // closed when the first read of prefix is held
}

// hold holds a read of key until ctx ends.
func (k *readHeldKV) hold(ctx context.Context, key string) {
	if strings.HasPrefix(key, k.prefix) {
		select {
		case <-k.inRead:
		default:
			close(k.inRead)
		}
		<-ctx.Done()
	}
}

func (k *readHeldKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.hold(ctx, key)
	return k.KV.Get(ctx, key, opts...)
}

func (k *readHeldKV) Txn(ctx context.Context) clientv3.Txn {
	return &heldTxn{Txn: k.KV.Txn(ctx), ctx: ctx, k: k}
}

// heldTxn is a Txn of readHeldKV: one with no comparison whose operations
// are all reads is held as a read of its first key.
type heldTxn struct {
	clientv3.Txn
	ctx    context.Context
	k      *readHeldKV
	ifs    bool
	reads  []clientv3.Op
	writes bool
}

func (t *heldTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.ifs, t.Txn = t.ifs || len(cs) > 0, t.Txn.If(cs...)
	return t
}

func (t *heldTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		if op.IsGet() {
			t.reads = append(t.reads, op)
		} else {
			t.writes = true
		}
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *heldTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.ifs && !t.writes && len(t.reads) > 0 {
		t.k.hold(t.ctx, string(t.reads[0].KeyBytes()))
	}
	return t.Txn.Commit()
}

// bumpingWatcher is a real etcd watcher that, before it creates a watch of a
// key under prefix, writes another key: the watch then starts at a later
// revision than the waiter's join, and the waiter reads the entry it waits
// for (waitChange's start read), as it does whenever anything was written
// to etcd in between (always, on a shared etcd under load).
type bumpingWatcher struct {
	clientv3.Watcher
	prefix string
	bump   func(ctx context.Context)
}

func (w *bumpingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if strings.HasPrefix(key, w.prefix) {
		w.bump(ctx)
	}
	return w.Watcher.Watch(ctx, key, opts...)
}

// A waiting Lock ended by Client.Close, or by its context, returns the same
// error wherever the call was: here, in its read of the queue after its
// join, the read of the entry ahead at its watch's start. An error that
// added the step ("etcd at ADDR: read the queue: context canceled") when
// the cancellation landed during a read, and not when it landed during the
// wait for a watch event, would make TestErrorMessages, which pins the
// latter (testdata/errors.golden, lock-closed-while-waiting and
// lock-cancelled-while-waiting), fail under load when Close came during
// the read; cancelledErr (acquire.go) gives the one text.
func TestAcquire_cancelledDuringReadSameError(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	for _, tc := range []struct {
		name   string
		end    func(c *dlock.Client, cancel context.CancelFunc)
		want   string
		closed bool
	}{
		{"close", func(c *dlock.Client, _ context.CancelFunc) { _ = c.Close() }, `lock "cancelread/close": dlock: client closed: context canceled`, true},
		{"cancel", func(_ *dlock.Client, cancel context.CancelFunc) { cancel() }, `lock "cancelread/cancel": context canceled`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "cancelread/" + tc.name
			holder := openClient(t, ctx, srv.URL())
			held, err := holder.Lock(ctx, key, longTTL)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = held.Unlock(ctx) }()

			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.Close() })
			kv := &readHeldKV{KV: cli.KV, prefix: etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), inRead: make(chan struct{})}
			w := &bumpingWatcher{Watcher: clientv3.NewWatcher(cli), prefix: kv.prefix, bump: func(ctx context.Context) {
				if _, err := admin.Put(ctx, "cancelread-bump", ""); err != nil {
					t.Error(err)
				}
			}}
			c, err := etcddlock.NewWrappedForTest(ctx, cli, kv, w)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				_, err := c.Lock(lctx, key, longTTL)
				errc <- err
			}()
			select {
			case <-kv.inRead:
			case err := <-errc:
				t.Fatalf("Lock returned before its read of the queue: %v", err)
			case <-ctx.Done():
				t.Fatal("the waiter did not read the queue (watchdog)")
			}
			tc.end(c, cancel)
			select {
			case err = <-errc:
			case <-ctx.Done():
				t.Fatal("Lock did not return (watchdog)")
			}
			if !errors.Is(err, context.Canceled) || errors.Is(err, dlock.ErrClosed) != tc.closed {
				t.Errorf("err = %v: want context.Canceled, ErrClosed %v", err, tc.closed)
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %q, want %q", err, tc.want)
			}
		})
	}
}
