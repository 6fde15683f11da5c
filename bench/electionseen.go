package main

import (
	"errors"
	"sync"
	"time"
)

// errObserveClosed: the observer's channel closed. With nothing received
// before, the backend cannot observe (dlock's Observe closes its channel at
// once when the driver has no driver.Observer).
var errObserveClosed = errors.New("the channel of Observe closed")

// errNotSeen: the observer did not receive the value in time.
var errNotSeen = errors.New("the observer did not receive the change within the time limit")

// seenLog records when an observer first received each leader value. Every
// value of a run is unique (candidate and term, or the Proclaim's number),
// so the first receipt of a value is the receipt of that change.
type seenLog struct {
	now func() int64 // the run's monotonic clock

	mu       sync.Mutex
	at       map[string]int64
	received bool          // anything at all, "" (no leader) included
	closed   bool          // the observer's channel closed
	change   chan struct{} // closed and replaced at every add and at close
}

func newSeenLog(now func() int64) *seenLog {
	return &seenLog{now: now, at: map[string]int64{}, change: make(chan struct{})}
}

// add records that the observer received v now.
func (l *seenLog) add(v string) {
	t := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.received = true
	if _, ok := l.at[v]; !ok && v != "" {
		l.at[v] = t
	}
	close(l.change)
	l.change = make(chan struct{})
}

// close records that the observer's channel closed.
func (l *seenLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	close(l.change)
	l.change = make(chan struct{})
}

// wait returns when v was first received, waiting up to timeout for it. It
// fails with errObserveClosed once the channel has closed without v, and
// with errNotSeen after timeout.
func (l *seenLog) wait(v string, timeout time.Duration) (int64, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		l.mu.Lock()
		t, ok := l.at[v]
		closed, change := l.closed, l.change
		l.mu.Unlock()
		switch {
		case ok:
			return t, nil
		case closed:
			return 0, errObserveClosed
		}
		select {
		case <-change:
		case <-timer.C:
			return 0, errNotSeen
		}
	}
}

// neverReceived reports whether the channel closed before anything came:
// the backend cannot observe.
func (l *seenLog) neverReceived() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed && !l.received
}
