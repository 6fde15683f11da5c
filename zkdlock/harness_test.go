package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// harness gives the conformance suite clients of one real ZooKeeper, each
// opened from a zk:// URL with its own session.
type harness struct {
	srv    *testserver.ZooKeeper
	admin  *zk.Conn // for fault injection and inspection
	ttl    time.Duration
	params string // more URL parameters, each starting with &
	// deployment is what params say, for the Clients of New.
	deployment zkdlock.Deployment
}

func (h *harness) TTL() time.Duration { return h.ttl }

func (h *harness) NewClient(ctx context.Context, t *testing.T) (*dlock.Client, error) {
	return h.open(ctx, t, h.srv.Addr())
}

func (h *harness) NewFaultyClient(ctx context.Context, t *testing.T) (*dlock.Client, dlocktest.Link, error) {
	p := dlocktest.NewProxy(t, h.srv.Addr())
	c, err := h.open(ctx, t, p.Addr())
	return c, p, err
}

func (h *harness) open(ctx context.Context, t *testing.T, addr string, opts ...dlock.Option) (*dlock.Client, error) {
	c, err := dlock.Open(ctx, fmt.Sprintf("zk://%s%s?session_timeout=%v&connect_timeout=30s%s", addr, zkdlock.DefaultRoot, h.ttl, h.params), opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

// NewOwnedClient returns a Client of New on a connection of its own, and a
// check that the connection still has the session it had then.
func (h *harness) NewOwnedClient(ctx context.Context, t *testing.T) (*dlock.Client, func(context.Context) error, error) {
	conn := dialZK(t, ctx, h.srv.Addr(), connOpts{timeout: h.ttl})
	sid := conn.SessionID()
	c, err := zkdlock.New(ctx, conn, &zkdlock.Options{SessionTimeout: h.ttl, Deployment: h.deployment})
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, func(context.Context) error {
		if conn.State() != zk.StateHasSession || conn.SessionID() != sid {
			return fmt.Errorf("state %v, session %#x; want its session %#x alive", conn.State(), conn.SessionID(), sid)
		}
		return nil
	}, nil
}

// CloseReleases is true: Close deletes the node of a lease in its minimum
// hold, which the owner's session would keep for as long as it lives.
func (h *harness) CloseReleases() bool { return true }

// DeleteKey deletes the key's lock nodes and then its node, as an operator
// with zkCli's deleteall would.
func (h *harness) DeleteKey(ctx context.Context, key string) error {
	path := zkdlock.KeyPathForTest(zkdlock.DefaultRoot, key)
	for {
		names, _, err := h.admin.Children(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := h.admin.Delete(path+"/"+n, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
		}
		err = h.admin.Delete(path, -1)
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			return nil
		case errors.Is(err, zk.ErrNotEmpty):
			continue // somebody queued meanwhile
		}
		return err
	}
}

// reapWithin bounds the wait for the server to delete an empty key node.
// The test server looks for empty containers every 100 ms; a persistent
// node would never go.
const reapWithin = 10 * time.Second

// Leftovers lists the lock nodes still stored for key, and the key node
// itself if the server does not delete it once empty. A client cannot tell
// a container from a persistent node (both show ephemeralOwner 0), so this
// waits, on a watch, for the server's container reaper.
func (h *harness) Leftovers(ctx context.Context, key string) ([]string, error) {
	path := zkdlock.KeyPathForTest(zkdlock.DefaultRoot, key)
	timeout := time.NewTimer(reapWithin)
	defer timeout.Stop()
	for {
		ok, _, ch, err := h.admin.ExistsW(path)
		if err != nil || !ok {
			return nil, err
		}
		names, _, err := h.admin.Children(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if len(names) > 0 {
			var left []string
			for _, n := range names {
				left = append(left, path+"/"+n)
			}
			return left, nil
		}
		select {
		case <-ch:
		case <-timeout.C:
			return []string{path + fmt.Sprintf(" (empty, not deleted by the server within %v: not a container?)", reapWithin)}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// RestartServer kills ZooKeeper and starts it again on the same data: the
// tree, the sessions and the zxids survive, as they do a real crash.
func (h *harness) RestartServer(ctx context.Context, t *testing.T) error {
	h.srv.Restart(t)
	return nil
}

// TestConformance runs the suite twice on the standalone test server: as
// users get it (the Clients find the server standalone), and with the
// ensemble rule (standalone=false), which an ensemble gets.
func TestConformance(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, testCtx(t), srv.Addr(), connOpts{timeout: 10 * time.Second})
	for _, v := range []struct {
		name, params string
		deployment   zkdlock.Deployment
	}{{"detected", "", zkdlock.Detect}, {"ensemble rule", "&standalone=false", zkdlock.Ensemble}} {
		t.Run(v.name, func(t *testing.T) {
			dlocktest.Run(t, func(ctx context.Context, t *testing.T) (dlocktest.Harness, error) {
				return &harness{srv: srv, admin: admin, ttl: testTTL, params: v.params, deployment: v.deployment}, nil
			})
		})
	}
}
