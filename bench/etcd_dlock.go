//go:build dlocketcd

package main

import (
	"context"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/etcddlock" // registers etcd:// for dlock.Open
)

// dlockEtcdLibrary is dlock's etcd backend. This file is built with the tag
// dlocketcd, which run.sh sets when the etcddlock package builds.
func dlockEtcdLibrary() *library {
	return &library{
		Name: "dlock (etcd)", Backend: "etcd", Module: "github.com/dlockdev/dlock", IsDlock: true,
		Waiting: etcdDlockWaiting,
		newContender: func(ctx context.Context, e *env, key string) (contender, error) {
			c, err := dlock.Open(ctx, "etcd://"+e.etcdAddr)
			if err != nil {
				return nil, err
			}
			return &dlockContender{c: c, key: key}, nil
		},
		newMulti: func(ctx context.Context, e *env, ttl time.Duration, _ bool) (multi, error) {
			c, err := dlock.Open(ctx, "etcd://"+e.etcdAddr)
			if err != nil {
				return nil, err
			}
			return &dlockMulti{c: c, opts: []dlock.LockOption{dlock.WithTTL(ttl)}}, nil
		},
	}
}

const etcdDlockWaiting = "one key per waiter under the lock's directory, ordered by create revision; each waiter watches the key just before its own (see docs/etcd.md)"
