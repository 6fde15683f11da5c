// Package tools pins the versions of the programs dlock's tests and checks
// run, in a module of its own so that no library module depends on them:
// the etcd server (go.etcd.io/etcd/server/v3, the version etcddlock's client
// is built against), which internal/testing/testserver builds with
//
//	go build -o etcd go.etcd.io/etcd/server/v3
//
// in this directory, and staticcheck (honnef.co/go/tools/cmd/staticcheck),
// which test.sh builds likewise. Both are built with GOWORK=off, so that the
// workspace's versions of their dependencies do not change them. Its
// command modproxy publishes the working tree into a module proxy for the
// release check (scripts/releasecheck.sh).
package tools
