package redisdlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/redis/go-redis/v9"
)

var _ driver.Observer = (*redisDriver)(nil)

// Watch implements driver.Observer (Election's Observe).
//
// The scripts PUBLISH a notice on the key's own channel, <lock key>:n (it
// shares the key's hash tag), whenever an election key's holders change: a
// grant (by acquire.lua, including the grant a waiting candidate's poll
// makes once the old leader's record has expired), a release, a cancelled
// candidate whose leaving grants the next one, a Publish. The notices come
// through the client's one Pub/Sub connection (notify.go), which subscribes
// to the channel while somebody watches it: a watch costs no connection and
// no request beyond the SUBSCRIBE. Only election keys get notices, so that
// locks pay nothing; on other kinds a watch wakes only at deadlines. A
// waiter that joins the queue, or leaves it without granting anybody,
// publishes nothing either, as a notice would cost every waiting Lock a
// command: a watch (Client.Watch, `dlock status --watch`) shows the
// waiters as they are at the next notice or deadline.
//
// A holder that dies without releasing runs no script, and Redis 7.0 sends
// no notice when a record passes its deadline (the hash holds several
// records; keyspace notifications are off by default and would not say
// which). So the watch also wakes at the earliest holder deadline the
// latest Inspect of the key found (driver.Observer allows this): the caller
// reads the state after each value, which either shows the holder gone or
// renewed, and then arms the next wake. An election's leader publishes
// each renewal ("r<ttl ms>", renew.lua), which moves the wake to the new
// deadline without a read (renewed): so observers of a live leader send
// nothing, and read only when a deadline passes with no renewal heard —
// the leader died, or its notice was lost. With nobody holding, a watch
// sends nothing and costs nothing.
//
// The channel receives its first value once the server has confirmed the
// subscription, so that a read after it misses no change. After a
// reconnect of the Pub/Sub connection, go-redis subscribes again and every
// watch receives a value: notices sent meanwhile were lost.
func (d *redisDriver) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := d.notify.watch(ctx, d.observerChannel(key))
	if err != nil {
		return nil, fmt.Errorf("redis at %s: watch %q: %w", d.addr, key, err)
	}
	return w.ch, nil
}

// observerChannel is the Pub/Sub channel of key's observers (the scripts'
// notify_observers).
func (d *redisDriver) observerChannel(key string) string {
	return keyName(d.lockKeys(key)[0]) + ":n"
}

// sawHolders is Inspect's report to the key's watches: its holders'
// earliest deadline is ttl from now, and each watch must wake then at the
// latest. It costs one atomic load when nobody watches.
func (d *redisDriver) sawHolders(key string, info *driver.LockInfo) {
	if d.notify.nwatched.Load() == 0 || len(info.Holders) == 0 {
		return
	}
	ttl := info.Holders[0].TTL
	for _, h := range info.Holders[1:] {
		ttl = min(ttl, h.TTL)
	}
	// The reply left the server at or after it read its clock; a record
	// lives while its deadline (ms) is not past, so it is dead one ms later
	// by the server's clock, which is no later than this much later here.
	d.notify.wakeAt(d.observerChannel(key), time.Now().Add(max(ttl, 0)+time.Millisecond))
}

// The states of one observer channel's subscription.
const (
	subscribing   = iota // SUBSCRIBE sent, its reply not yet received
	subscribed           // confirmed: notices arrive
	unsubscribing        // UNSUBSCRIBE sent, its reply not yet received
)

// watchChan is the subscription to one observer channel and its watches.
// Its state follows the replies, which the server sends in the order of the
// commands: so that a watch is told "in place" only by the reply to a
// SUBSCRIBE sent after every earlier UNSUBSCRIBE, the notifier sends an
// UNSUBSCRIBE only from subscribed, and a SUBSCRIBE only with no command of
// the channel's in flight.
type watchChan struct {
	state   int
	members map[*watch]struct{}
}

// watch is one Watch call.
type watch struct {
	ch     chan struct{} // buffer 1: a full buffer already says "changed"
	timer  *time.Timer   // the deadline wake, if armed
	wakeAt time.Time     // when timer fires; zero when none is armed
	closed bool
}

// signal tells w that something may have changed, unless it knows already.
func (w *watch) signal() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// watchState is the notifier's part for watches. It has its own mutex, so
// that a watch's SUBSCRIBE (a write that may wait for a dial while the
// server is down) never holds up the hand-off notices of waiting Lock
// calls.
type watchState struct {
	wmu      sync.Mutex
	watches  map[string]*watchChan // by channel; guarded by wmu
	wclosed  bool                  // guarded by wmu
	nwatched atomic.Int32          // len(watches), for Inspect's fast path
}

// watch adds a watch of channel, subscribing if it is the first.
func (n *notifier) watch(ctx context.Context, channel string) (*watch, error) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if n.wclosed {
		return nil, dlock.ErrClosed
	}
	w := &watch{ch: make(chan struct{}, 1)}
	wc := n.watches[channel]
	if wc == nil {
		wc = &watchChan{members: map[*watch]struct{}{}}
		n.watches[channel] = wc
		n.nwatched.Store(int32(len(n.watches)))
		n.subscribe(channel, wc)
	}
	wc.members[w] = struct{}{}
	if wc.state == subscribed {
		w.signal()
	}
	context.AfterFunc(ctx, func() { n.unwatch(channel, w) })
	return w, nil
}

// subscribe sends SUBSCRIBE for wc. An error leaves channel among the
// PubSub's channels (go-redis records it first), and the reconnect that
// follows subscribes again: its reply confirms it as this one's would
// have. Caller holds wmu.
func (n *notifier) subscribe(channel string, wc *watchChan) {
	wc.state = subscribing
	_ = n.ps.Subscribe(context.Background(), channel)
}

// unwatch ends w, and unsubscribes from channel after its last watch.
func (n *notifier) unwatch(channel string, w *watch) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if w.closed {
		return
	}
	w.close()
	wc := n.watches[channel]
	if wc == nil {
		return
	}
	delete(wc.members, w)
	if len(wc.members) == 0 && wc.state == subscribed {
		n.unsubscribe(channel, wc)
	}
	// subscribing: the reply will find no members and unsubscribe then;
	// unsubscribing: already leaving.
}

func (n *notifier) unsubscribe(channel string, wc *watchChan) {
	wc.state = unsubscribing
	// An error drops the connection, and go-redis, which forgot channel
	// first, does not subscribe to it again: resubscribed then settles it.
	_ = n.ps.Unsubscribe(context.Background(), channel)
}

func (w *watch) close() {
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	close(w.ch)
}

// notice delivers a notice published on an observer channel.
func (n *notifier) notice(channel string) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if wc := n.watches[channel]; wc != nil && wc.state == subscribed {
		for w := range wc.members {
			w.signal()
		}
	}
}

// subscription follows the server's reply to a SUBSCRIBE or UNSUBSCRIBE of
// an observer channel.
func (n *notifier) subscription(s *redis.Subscription) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	wc := n.watches[s.Channel]
	if wc == nil || n.wclosed {
		return // a late reply for a channel given up
	}
	switch {
	case s.Kind == "subscribe" && wc.state != unsubscribing:
		// Confirmed, or subscribed again after a reconnect: either way
		// every watch must read now (notices may have been lost).
		wc.state = subscribed
		if len(wc.members) == 0 {
			n.unsubscribe(s.Channel, wc)
			return
		}
		for w := range wc.members {
			w.signal()
		}
	case s.Kind == "unsubscribe" && wc.state == unsubscribing:
		n.settleUnsubscribed(s.Channel, wc)
	}
	// Anything else is the reply to a command sent before one that is
	// still in flight (a "subscribe" before our UNSUBSCRIBE, an
	// "unsubscribe" before our SUBSCRIBE): its own reply follows.
}

// settleUnsubscribed ends an UNSUBSCRIBE: the channel is forgotten, or
// subscribed again for the watches that came meanwhile. Caller holds wmu.
func (n *notifier) settleUnsubscribed(channel string, wc *watchChan) {
	if len(wc.members) > 0 {
		n.subscribe(channel, wc)
		return
	}
	delete(n.watches, channel)
	n.nwatched.Store(int32(len(n.watches)))
}

// resubscribed follows a reconnect (the client channel's own "subscribe"
// reply): an UNSUBSCRIBE in flight on the lost connection gets no reply,
// and go-redis did not subscribe again to its channel.
//
// An UNSUBSCRIBE sent on the new connection after the resubscription gets
// its reply after this one, and is taken for settled here too: if watches
// came meanwhile, the SUBSCRIBE sent now follows it on the wire, and its
// reply, which comes after the stray "unsubscribe" (ignored in
// subscription), is what confirms them.
func (n *notifier) resubscribed() {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	for channel, wc := range n.watches {
		if wc.state == unsubscribing {
			n.settleUnsubscribed(channel, wc)
		}
	}
}

// wakeAt makes every watch of channel wake at t at the latest (see
// sawHolders). An earlier wake already armed stays: waking early costs a
// read, waking late would miss an expiry.
func (n *notifier) wakeAt(channel string, t time.Time) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	wc := n.watches[channel]
	if wc == nil {
		return
	}
	for w := range wc.members {
		if !w.wakeAt.IsZero() && !t.Before(w.wakeAt) {
			continue
		}
		if w.timer != nil {
			w.timer.Stop()
		}
		w.wakeAt = t
		w.timer = time.AfterFunc(time.Until(t), func() { n.wake(w, t) })
	}
}

// renewed follows a leader's renewal notice on channel: the leader's
// record lives until at least ttl after the server renewed it, which was
// before now, so every watch's deadline wake moves to ttl from now (plus
// the millisecond of sawHolders) without a read. A wake already later
// stays.
func (n *notifier) renewed(channel string, ttl time.Duration) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	wc := n.watches[channel]
	if wc == nil || wc.state != subscribed {
		return
	}
	t := time.Now().Add(ttl + time.Millisecond)
	for w := range wc.members {
		if !w.wakeAt.IsZero() && !t.After(w.wakeAt) {
			continue
		}
		if w.timer != nil {
			w.timer.Stop()
		}
		w.wakeAt = t
		w.timer = time.AfterFunc(time.Until(t), func() { n.wake(w, t) })
	}
}

// wake is a watch's deadline timer firing.
func (n *notifier) wake(w *watch, t time.Time) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if w.closed || !w.wakeAt.Equal(t) {
		return // ended, or re-armed earlier (that timer was stopped, but may have fired already)
	}
	w.wakeAt = time.Time{}
	w.signal()
}

// closeWatches ends every watch: the client is closing.
func (n *notifier) closeWatches() {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	n.wclosed = true
	for _, wc := range n.watches {
		for w := range wc.members {
			w.close()
		}
	}
	n.watches = nil
	n.nwatched.Store(0)
}
