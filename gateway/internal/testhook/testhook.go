// Package testhook lets the gateway's tests stop it at the moments where
// races happen. Not for applications: every hook is unset outside tests.
// The hooks are atomic: a test sets them while timers of other gateways
// (a ticket's expiry) may be reading them.
package testhook

import "sync/atomic"

var granted, abandoned atomic.Pointer[func(key string)]

// SetGranted sets the function called by the goroutine that acquired key
// for a waiter, after the backend granted it and before the grant is
// handed to the poll that waits for it (or released, when nobody does any
// more); nil unsets it.
func SetGranted(f func(key string)) { set(&granted, f) }

// SetAbandoned sets the function called when a waiter for key leaves the
// queue because its poll's client went away, its ticket expired or was
// cancelled, or the gateway closed; nil unsets it.
func SetAbandoned(f func(key string)) { set(&abandoned, f) }

// Granted calls the function SetGranted set, if any.
func Granted(key string) { call(&granted, key) }

// Abandoned calls the function SetAbandoned set, if any.
func Abandoned(key string) { call(&abandoned, key) }

func set(p *atomic.Pointer[func(string)], f func(string)) {
	if f == nil {
		p.Store(nil)
		return
	}
	p.Store(&f)
}

func call(p *atomic.Pointer[func(string)], key string) {
	if f := p.Load(); f != nil {
		(*f)(key)
	}
}
