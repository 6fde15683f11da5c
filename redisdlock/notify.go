package redisdlock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// healthCheck is how long the subscription may stay silent before the
// notifier pings the server, and how long it then waits for any reply before
// it drops the connection and subscribes again. (go-redis' own channel pings
// too, but never notices a ping that goes unanswered.)
const healthCheck = 3 * time.Second

// notifier receives hand-off notices on the client's own Pub/Sub channel and
// passes each to the waiting Lock call it names. One subscription serves
// every waiter of the client, so waiting costs no command per Lock call.
//
// Its goroutine reads the subscription itself (PubSub.ReceiveTimeout) rather
// than through go-redis' ChannelWithSubscriptions, which adds a goroutine and
// a channel between the socket and the waiter: one cross-thread wake-up less
// on every hand-off. The health check that channel did is done here.
type notifier struct {
	ps      *redis.PubSub
	channel string
	stop    chan struct{} // closed by close
	done    chan struct{} // closed when run returns
	once    sync.Once

	mu      sync.Mutex
	waiters map[ownerArg]waiter // by owner id; guarded by mu
	// early keeps the latest notices whose waiter had not registered yet,
	// oldest overwritten first (see register); guarded by mu.
	early     [earlyNotices]notice
	nextEarly int
	// resubs counts the subscriptions made again after a reconnect: a
	// waiter that registers after one may have missed a notice.
	resubs atomic.Uint64

	log *logTo
	// refused holds the error of the subscription's latest dial while the
	// server refuses connections (nil otherwise; never set on a Cluster,
	// where the subscription's node is not the keys'). See unreachable.
	refused atomic.Pointer[error]
	gate    bool // refused may be set: not a Cluster

	// The observer channels this connection also subscribes to (watch.go).
	watchState
}

// waiter is one waiting Lock call. It receives the token of a hand-off
// notice, or pollNow when notices may have been lost. Only the newest event
// is kept: an older token still unread announces a grant that has been lost
// since, and a poll finds out everything a lost notice would have said.
type waiter chan uint64

// pollNow asks a waiter to poll; no token is 0.
const pollNow = 0

// notice is a hand-off notice: the owner granted and its token.
type notice struct {
	owner ownerArg
	token uint64
}

// earlyNotices is how many notices the notifier keeps for waiters that
// have not registered yet. A waiter registers after the reply that queued
// it, and a release can grant it and publish in between: that window is a
// few µs, so a handful of places is plenty; a notice pushed out early
// (or one for a waiter that gave up) costs at most a poll.
const earlyNotices = 16

func newNotifier(ctx context.Context, rdb redis.UniversalClient, channel string, log *logTo) (*notifier, error) {
	ps := rdb.Subscribe(ctx, channel)
	// Wait for the subscription to be confirmed: a notice published before
	// that would be lost.
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, err
	}
	n := &notifier{ps: ps, channel: channel, stop: make(chan struct{}), done: make(chan struct{}), waiters: map[ownerArg]waiter{}, log: log}
	_, cluster := rdb.(*redis.ClusterClient)
	n.gate = !cluster
	n.watches = map[string]*watchChan{}
	go n.run()
	return n, nil
}

func (n *notifier) run() {
	defer close(n.done)
	ctx := context.Background()
	pinged := false // a ping is out and nothing has come since
	failures := 0
	for {
		msg, err := n.receive(ctx, pinged)
		if err == nil {
			if failures > 0 {
				n.refused.Store(nil)
				n.logf(slog.LevelInfo, "redisdlock: subscription restored", "channel", n.channel)
			}
			pinged, failures = false, 0
			n.deliver(msg)
			continue
		}
		select {
		case <-n.stop:
			return
		default:
		}
		var ne net.Error
		if !pinged && errors.As(err, &ne) && ne.Timeout() {
			// Silent for healthCheck: ask for a sign of life. If the ping
			// cannot even be sent, go-redis has dropped the connection.
			pinged = n.ps.Ping(ctx) == nil
			continue
		}
		// The connection broke, or the ping went unanswered: go-redis has
		// dropped the connection, and the next receive dials and
		// subscribes again (a *redis.Subscription tells the waiters to
		// poll). Back off while the server stays unreachable.
		pinged = false
		failures++
		if failures == 1 {
			n.logf(slog.LevelWarn, "redisdlock: subscription lost, reconnecting", "channel", n.channel, "error", err)
		}
		n.setRefused(err)
		if failures > 1 && !n.pause(100*time.Millisecond) {
			return
		}
	}
}

// setRefused records whether err, the subscription's latest failure, was a
// failed dial: the server refuses connections, or cannot be reached at all.
func (n *notifier) setRefused(err error) {
	var op *net.OpError
	if !n.gate || !errors.As(err, &op) || op.Op != "dial" {
		n.refused.Store(nil)
		return
	}
	n.refused.Store(&err)
}

// unreachable returns the error of the subscription's latest dial while the
// server cannot be dialled, and nil otherwise. The driver then fails its
// requests with it instead of sending them: go-redis would dial for each,
// fail, and print "connection pool: failed to dial" to stderr through its
// process-wide logger, while the subscription's own reconnects, which go
// around that pool, print nothing. The subscription keeps dialling (every
// 100 ms) and clears it on its first success.
func (n *notifier) unreachable() error {
	if p := n.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// logf logs to the Client's logger, if it has one yet.
func (n *notifier) logf(level slog.Level, msg string, args ...any) {
	if l := n.log.logger(); l != nil {
		l.Log(context.Background(), level, msg, args...)
	}
}

// receive reads the next message. Once a ping is out, a silent connection
// is dead: the read then has a context deadline, whose expiry go-redis
// treats as a broken connection (a plain read timeout it keeps).
func (n *notifier) receive(ctx context.Context, pinged bool) (any, error) {
	if !pinged {
		return n.ps.ReceiveTimeout(ctx, healthCheck)
	}
	ctx, cancel := context.WithTimeout(ctx, healthCheck)
	defer cancel()
	return n.ps.Receive(ctx)
}

// pause waits d, or returns false at once when the notifier is closed.
func (n *notifier) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.stop:
		return false
	}
}

func (n *notifier) deliver(msg any) {
	switch m := msg.(type) {
	case *redis.Message:
		if m.Channel != n.channel {
			// An observer channel's (watch.go): a leader's renewal, or
			// a change.
			if ms, ok := strings.CutPrefix(m.Payload, "r"); ok {
				if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
					n.renewed(m.Channel, time.Duration(v)*time.Millisecond)
					return
				}
			}
			n.notice(m.Channel)
			return
		}
		id, tok, ok := strings.Cut(m.Payload, ":")
		token, err := strconv.ParseUint(tok, 10, 64)
		if !ok || err != nil || token == pollNow || len(id) > len(ownerArg{}.b) {
			return
		}
		var owner ownerArg
		owner.n = uint8(copy(owner.b[:], id))
		n.mu.Lock()
		if w := n.waiters[owner]; w != nil {
			w.set(token)
		} else {
			n.early[n.nextEarly] = notice{owner, token}
			n.nextEarly = (n.nextEarly + 1) % earlyNotices
		}
		n.mu.Unlock()
	case *redis.Subscription:
		if m.Channel != n.channel {
			n.subscription(m) // an observer channel's (watch.go)
			return
		}
		// go-redis subscribed again after a reconnect: notices sent while
		// the connection was down are lost, so every waiter polls now.
		// (Every watch reads when its own channel's reply comes.)
		n.mu.Lock()
		n.resubs.Add(1)
		for _, w := range n.waiters {
			w.set(pollNow)
		}
		n.mu.Unlock()
		n.resubscribed()
	}
	// *redis.Pong: a sign of life, nothing to do.
}

// set replaces the waiter's unread event, if any, by v. Only deliver sends,
// under n.mu, so the send never blocks.
func (w waiter) set(v uint64) {
	select {
	case <-w:
	default:
	}
	w <- v
}

// resubscriptions returns a count for register: read it before the request
// whose reply tells that the caller waits.
func (n *notifier) resubscriptions() uint64 { return n.resubs.Load() }

// register starts delivering owner's notices to the waiter it returns. A
// waiter registers only once a reply says that it waits (a Lock that finds
// the key free registers nothing), so a notice may come first: it is then
// among the early ones, and handed over now. resubs is resubscriptions()
// read before that request: if the subscription was made again since,
// notices may have been lost, and the waiter is told to poll.
func (n *notifier) register(owner ownerArg, resubs uint64) waiter {
	w := make(waiter, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiters[owner] = w
	var early uint64 // the newest grant's: tokens increase
	for i, e := range n.early {
		if e.owner == owner {
			early = max(early, e.token)
			n.early[i] = notice{}
		}
	}
	if early != 0 {
		w.set(early)
	}
	if n.resubs.Load() != resubs {
		w.set(pollNow)
	}
	return w
}

func (n *notifier) unregister(owner ownerArg) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.waiters, owner)
}

func (n *notifier) close() error {
	err := redis.ErrClosed
	n.once.Do(func() {
		n.closeWatches()
		close(n.stop)
		err = n.ps.Close()
	})
	<-n.done
	return err
}
