// Package promtest holds dlockprom's tests against a real lock server (a
// redis-server the tests start): a scripted scenario's events, scraped from
// the collector. It is a module of its own so that redisdlock and go-redis
// stay out of dlockprom's go.mod: `go mod tidy` in a module that imports
// dlockprom loads the tests of dlockprom's package too, and would download
// every module they import.
package promtest
