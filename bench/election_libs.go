package main

// The elections measured by the election section: dlock's Client.Election
// on its three backends, and etcd's concurrency.Election, behind one small
// interface so that one harness drives them all.

import (
	"context"
	"errors"

	"github.com/dlockdev/dlock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// electionClient is one client (its own connection, or etcd session) taking
// part in one election: a candidate, or an observer.
type electionClient interface {
	// Campaign waits until the caller leads, publishing value, or until
	// ctx ends.
	Campaign(ctx context.Context, value string) (electionTerm, error)
	// Observe follows the election until ctx ends: seen is called, in the
	// goroutine that receives each state from the library's channel, with
	// the leader's value ("" when nobody leads). The returned channel is
	// closed when the library's channel is.
	Observe(ctx context.Context, seen func(value string)) <-chan struct{}
	Close()
}

// electionTerm is one term as leader.
type electionTerm interface {
	Resign(ctx context.Context) error
	Proclaim(ctx context.Context, value string) error
}

// electionLib is one election implementation on one backend.
type electionLib struct {
	Name, Backend, Module string
	IsDlock               bool
	// Missing is why it cannot run here (empty when it can).
	Missing   string
	newClient func(ctx context.Context, e *env, key string) (electionClient, error)
}

// electionLibs are dlock's backends among libs (as -only chose them), and
// etcd's concurrency.Election when -only lets it through.
func electionLibs(libs []*library, keep func(name string) bool) []*electionLib {
	var out []*electionLib
	for _, l := range libs {
		if !l.IsDlock {
			continue
		}
		el := &electionLib{Name: l.Name, Backend: l.Backend, Module: l.Module, IsDlock: true, Missing: l.Missing}
		if l.Missing == "" {
			newContender := l.newContender
			el.newClient = func(ctx context.Context, e *env, key string) (electionClient, error) {
				c, err := newContender(ctx, e, key)
				if err != nil {
					return nil, err
				}
				d, ok := c.(*dlockContender)
				if !ok {
					c.Close()
					return nil, errors.New("not a dlock client")
				}
				return &dlockElection{d: d, e: d.c.Election(key)}, nil
			}
		}
		out = append(out, el)
	}
	const etcdName = "etcd Election"
	if keep(etcdName) {
		out = append(out, &electionLib{Name: etcdName, Backend: "etcd", Module: "go.etcd.io/etcd/client/v3", newClient: newEtcdElection})
	}
	return out
}

// ---- dlock ----

type dlockElection struct {
	d *dlockContender
	e *dlock.Election
}

func (d *dlockElection) Campaign(ctx context.Context, value string) (electionTerm, error) {
	t, err := d.e.Campaign(ctx, value)
	if err != nil {
		return nil, err
	}
	return t, nil // *dlock.Leadership has Resign and Proclaim
}

func (d *dlockElection) Observe(ctx context.Context, seen func(string)) <-chan struct{} {
	ch := d.e.Observe(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for info := range ch {
			v := ""
			if info.HasLeader() {
				v = info.Value
			}
			seen(v)
		}
	}()
	return done
}

func (d *dlockElection) Close() { d.d.Close() }

// ---- etcd concurrency.Election ----

// etcdElection is one etcd client with its own session (lease and
// keep-alive, TTL 10 s as for the etcd Mutex): a candidate's key is the
// prefix plus its session's lease, so each candidate needs its own.
type etcdElection struct {
	cli *clientv3.Client
	s   *concurrency.Session
	e   *concurrency.Election
}

func newEtcdElection(ctx context.Context, e *env, key string) (electionClient, error) {
	cli, s, err := etcdSession(ctx, e)
	if err != nil {
		return nil, err
	}
	return &etcdElection{cli: cli, s: s, e: concurrency.NewElection(s, "/etcd-bench-election/"+key)}, nil
}

func (c *etcdElection) Campaign(ctx context.Context, value string) (electionTerm, error) {
	if err := c.e.Campaign(ctx, value); err != nil {
		return nil, err
	}
	return c.e, nil // *concurrency.Election has Resign and Proclaim
}

func (c *etcdElection) Observe(ctx context.Context, seen func(string)) <-chan struct{} {
	ch := c.e.Observe(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range ch {
			v := ""
			if len(resp.Kvs) > 0 {
				v = string(resp.Kvs[0].Value)
			}
			seen(v)
		}
	}()
	return done
}

func (c *etcdElection) Close() {
	_ = c.s.Close()
	_ = c.cli.Close()
}
