package main

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// signalRelay passes the signals dlock elect catches on to whichever part
// of it listens at the moment: the campaign (cancelOnSignal) or the term
// (supervise, which forwards them to PROGRAM's group). Between the two,
// signals wait in out's buffer, so none is lost: one that comes just after
// a term ends interrupts the next campaign.
//
// It also remembers whether a signal that ends programs (all but SIGUSR1
// and SIGUSR2) came: after a term, that means dlock was told to stop, not
// to campaign again. The flag is set before the signal is passed on, so a
// term that received the signal sees the flag once it returns.
type signalRelay struct {
	out     chan os.Signal
	ended   atomic.Bool
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// relaySignals starts relaying the signals of in.
func relaySignals(in <-chan os.Signal) *signalRelay {
	r := &signalRelay{out: make(chan os.Signal, 16), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			var s os.Signal
			select {
			case s = <-in:
			case <-r.quit:
				return
			}
			if s != syscall.SIGUSR1 && s != syscall.SIGUSR2 {
				r.ended.Store(true)
			}
			select {
			case r.out <- s:
			case <-r.quit:
				return
			}
		}
	}()
	return r
}

// ending reports whether a signal that ends programs has come.
func (r *signalRelay) ending() bool { return r.ended.Load() }

// stop ends the relay.
func (r *signalRelay) stop() {
	r.stopped.Do(func() {
		close(r.quit)
		<-r.done
	})
}
