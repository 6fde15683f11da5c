package redisdlock

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// notifier receives hand-off notices on the client's own Pub/Sub channel and
// passes each to the waiting Lock call it names. One subscription serves
// every waiter of the client, so waiting costs no command per Lock call.
type notifier struct {
	ps      *redis.PubSub
	channel string
	done    chan struct{}

	mu      sync.Mutex
	waiters map[string]*waiter // by owner id; guarded by mu
}

// waiter is one waiting Lock call.
type waiter struct {
	granted chan uint64   // the token, from a hand-off notice
	poke    chan struct{} // poll now: notices may have been lost
}

func newNotifier(ctx context.Context, rdb redis.UniversalClient, channel string) (*notifier, error) {
	ps := rdb.Subscribe(ctx, channel)
	// Wait for the subscription to be confirmed: a notice published before
	// that would be lost.
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, err
	}
	n := &notifier{ps: ps, channel: channel, done: make(chan struct{}), waiters: map[string]*waiter{}}
	go n.run(ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)))
	return n, nil
}

func (n *notifier) run(ch <-chan any) {
	defer close(n.done)
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Message:
			owner, tok, ok := strings.Cut(m.Payload, ":")
			token, err := strconv.ParseUint(tok, 10, 64)
			if !ok || err != nil {
				continue
			}
			n.mu.Lock()
			if w := n.waiters[owner]; w != nil {
				// Keep only the newest notice: an older one still
				// unread announces a grant that has been lost since.
				select {
				case <-w.granted:
				default:
				}
				w.granted <- token
			}
			n.mu.Unlock()
		case *redis.Subscription:
			// go-redis resubscribed after a reconnect: notices sent while
			// the connection was down are lost, so every waiter polls now.
			n.mu.Lock()
			for _, w := range n.waiters {
				select {
				case w.poke <- struct{}{}:
				default:
				}
			}
			n.mu.Unlock()
		}
	}
}

func (n *notifier) register(owner string) *waiter {
	w := &waiter{granted: make(chan uint64, 1), poke: make(chan struct{}, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiters[owner] = w
	return w
}

func (n *notifier) unregister(owner string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.waiters, owner)
}

func (n *notifier) close() error {
	err := n.ps.Close()
	<-n.done
	return err
}
