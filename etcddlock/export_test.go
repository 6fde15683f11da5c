package etcddlock

import (
	"context"
	"net/url"
	"strings"

	"github.com/coreos/go-semver/semver"
	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// QueueDirForTest returns the etcd key prefix of the entries of key.
func QueueDirForTest(prefix, key string) string {
	return (&etcdDriver{prefix: prefix}).queueDir(key)
}

// OpenDriverForTest opens the driver behind dlock.Open for an etcd URL, for
// tests that wrap it to inject faults.
func OpenDriverForTest(ctx context.Context, rawURL string) (driver.Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return openURL(ctx, u)
}

// NewWithBeforeWatchForTest is New with a hook that runs in every waiter,
// between its read of the queue and the start of its watch of the entry it
// waits for (pred, its etcd key; "" for a semaphore's waiter, which counts
// several): the window in which the entry may go, or go and come back,
// unseen by the watch.
func NewWithBeforeWatchForTest(ctx context.Context, cli *clientv3.Client, opts *Options, hook func(ctx context.Context, pred string)) (*dlock.Client, error) {
	d, err := newDriver(ctx, cli, cli.KV, clientv3.NewLease(cli), clientv3.NewWatcher(cli), opts, nil, strings.Join(cli.Endpoints(), ","))
	if err != nil {
		return nil, err
	}
	d.beforeWatch = hook
	c, err := dlock.NewClient(d, d.opts.ClientOptions...)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return c, nil
}

// RevokesLiveLeasesForTest reports whether New and Open refuse etcd version v.
func RevokesLiveLeasesForTest(v string) (bool, error) {
	sv, err := semver.NewVersion(v)
	if err != nil {
		return false, err
	}
	return revokesLiveLeases(sv), nil
}
