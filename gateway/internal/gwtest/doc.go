// Package gwtest tests the lock gateway against real servers, through
// net/http and through curl. It is a module of its own so that the
// gateway's go.mod needs no backend: a library user's go.sum lists even the
// test-only requirements of the modules it imports.
package gwtest
