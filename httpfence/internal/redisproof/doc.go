// Package redisproof holds httpfence's SIGSTOP proof: a lock holder on a
// real redis-server, frozen past its lease, whose late write the Guard
// refuses. It is a module of its own so that httpfence's go.mod requires
// dlock alone: a user's go.sum lists even the test-only requirements of the
// modules it imports, and the proof needs redisdlock and go-redis.
package redisproof
