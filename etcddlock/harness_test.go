package etcddlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// harness gives the conformance suite clients of the shared etcd process
// (internal/testing/testserver).
type harness struct {
	srv   *testserver.Etcd
	admin *clientv3.Client // for fault injection and inspection
}

func newHarness(t *testing.T) *harness {
	srv := testserver.SharedEtcd(t)
	return &harness{srv: srv, admin: adminClient(t, srv.Addr())}
}

// adminClient returns a plain etcd client, closed when the test ends.
func adminClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// The test server grants leases of one second (its minimum): the suite's
// scenarios that wait for an expiry take about that long.
func (h *harness) TTL() time.Duration { return time.Second }

func (h *harness) NewClient(ctx context.Context, t *testing.T) (*dlock.Client, error) {
	return h.clientVia(ctx, t, h.srv.Addr())
}

// NewFaultyClient connects through a proxy that can cut the client off:
// gRPC then sees a silent network, as in a partition.
func (h *harness) NewFaultyClient(ctx context.Context, t *testing.T) (*dlock.Client, dlocktest.Link, error) {
	p := dlocktest.NewProxy(t, h.srv.Addr())
	c, err := h.clientVia(ctx, t, p.Addr())
	return c, p, err
}

func (h *harness) clientVia(ctx context.Context, t *testing.T, addr string, opts ...dlock.Option) (*dlock.Client, error) {
	c, err := dlock.Open(ctx, "etcd://"+addr, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

// NewOwnedClient returns a Client of New on an etcd client of its own, and
// a Get on that client.
func (h *harness) NewOwnedClient(ctx context.Context, t *testing.T) (*dlock.Client, func(context.Context) error, error) {
	cli := adminClient(t, h.srv.Addr())
	c, err := etcddlock.New(ctx, cli, nil)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, func(ctx context.Context) error {
		_, err := cli.Get(ctx, "dlocktest/probe")
		return err
	}, nil
}

// CloseReleases is false: Close leaves a lease in its minimum hold to
// etcd's expiry of its lease, with New as with Open.
func (h *harness) CloseReleases() bool { return false }

// DeleteKey deletes the holder's and the waiters' entries behind their back.
func (h *harness) DeleteKey(ctx context.Context, key string) error {
	_, err := h.admin.Delete(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix())
	return err
}

// Leftovers lists the etcd keys still stored for key.
func (h *harness) Leftovers(ctx context.Context, key string) ([]string, error) {
	return stored(ctx, h.admin, key)
}

// stored lists the etcd keys stored for key: its queue's entries and
// release markers, and the tail beside the queue's directory.
func stored(ctx context.Context, admin *clientv3.Client, key string) ([]string, error) {
	dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
	tail := strings.TrimSuffix(dir, "/") + "\x00tail"
	// The prefix without the slash reaches the tail, and the directories
	// of keys that extend key's escaped name, which are not key's.
	resp, err := admin.Get(ctx, strings.TrimSuffix(dir, "/"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); strings.HasPrefix(k, dir) || k == tail {
			out = append(out, k)
		}
	}
	return out, nil
}

// RestartServer stops etcd and starts it again on the same data: etcd keeps
// everything on disk, including its revision, so tokens keep increasing.
func (h *harness) RestartServer(ctx context.Context, t *testing.T) error {
	return h.srv.Restart()
}

func TestConformance(t *testing.T) {
	dlocktest.Run(t, func(ctx context.Context, t *testing.T) (dlocktest.Harness, error) {
		return newHarness(t), nil
	})
}
