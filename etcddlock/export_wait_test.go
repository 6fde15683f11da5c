package etcddlock

import (
	"context"
	"strings"

	"github.com/dlockdev/dlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// NewWrappedForTest is New with kv and w in place of cli's KV and watcher
// (nil: cli's own): a test wraps cli's real ones to hold back some
// requests or responses.
func NewWrappedForTest(ctx context.Context, cli *clientv3.Client, kv clientv3.KV, w clientv3.Watcher) (*dlock.Client, error) {
	if kv == nil {
		kv = cli.KV
	}
	if w == nil {
		w = clientv3.NewWatcher(cli)
	}
	d, err := newDriver(ctx, cli, kv, clientv3.NewLease(cli), w, nil, nil, strings.Join(cli.Endpoints(), ","))
	if err != nil {
		return nil, err
	}
	c, err := dlock.NewClient(d, d.opts.ClientOptions...)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return c, nil
}
