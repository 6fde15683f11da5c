// Package testhook lets the gateway's tests stop it at the moments where
// races happen. Not for applications: every hook is nil outside tests.
package testhook

// Granted, when set, is called by the goroutine that acquired key for a
// waiter, after the backend granted it and before the grant is handed to
// the poll that waits for it (or released, when nobody does any more).
var Granted func(key string)

// Abandoned, when set, is called when a waiter for key leaves the queue
// because its poll's client went away, its ticket expired or was
// cancelled, or the gateway closed.
var Abandoned func(key string)
