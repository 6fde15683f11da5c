// Package redistrace holds dlockotel's end-to-end test on a real
// redis-server: go-redis's own spans (redisotel) under dlock.acquire. It is
// a module of its own so that dlockotel's go.mod requires no backend: a
// user's go.sum lists even the test-only requirements of the modules it
// imports.
package redistrace
