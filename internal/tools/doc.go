// Package tools pins the versions of the programs dlock's tests run, in a
// module of its own so that no library module depends on them: the etcd
// server (go.etcd.io/etcd/server/v3, the version etcddlock's client is built
// against), which internal/testserver builds with
//
//	go build -o etcd go.etcd.io/etcd/server/v3
//
// in this directory.
package tools
