package main

import "fmt"

// variant is the servers' configuration for a run.
type variant string

const (
	// durable is each server's default configuration, which makes a write
	// durable before it is acknowledged where the server does so by
	// default: redis-server with its built-in defaults (RDB snapshots, no
	// append-only file), ZooKeeper with forceSync=yes, etcd with fsync.
	// The committed report's figures are of this variant, as a user's
	// servers would run.
	durable variant = "durable"
	// nofsync keeps nothing that must survive a crash: Redis without
	// persistence, ZooKeeper with forceSync=no, etcd with UnsafeNoFsync.
	// It shows what the clients cost when the disk does not dominate.
	nofsync variant = "nofsync"
)

// parseVariant checks the value of -variant.
func parseVariant(s string) (variant, error) {
	switch v := variant(s); v {
	case durable, nofsync:
		return v, nil
	}
	return "", fmt.Errorf("-variant %q: want %q or %q", s, durable, nofsync)
}

// describe says how each server was configured, for the report.
func (v variant) describe() string {
	switch v {
	case durable:
		return "durable: each server in its default configuration — redis-server with its built-in defaults (RDB snapshots, no append-only file), ZooKeeper with `forceSync=yes` (fsync of its log before a write is acknowledged), etcd with fsync of its WAL"
	case nofsync:
		return "no-fsync: Redis without persistence (`--save \"\" --appendonly no`), ZooKeeper with `forceSync=no`, etcd with `UnsafeNoFsync`"
	}
	return "not recorded (a run older than the variants: Redis without persistence, ZooKeeper with `forceSync=no`, etcd with `UnsafeNoFsync`)"
}

// label is the variant as a table heading says it.
func (v variant) label() string {
	switch v {
	case durable:
		return "durable servers"
	case nofsync:
		return "no-fsync servers"
	}
	return "no-fsync servers, variant not recorded"
}
