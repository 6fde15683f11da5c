package zkdlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/zkdlock"
)

// TestUnlock_lostReply_confirmedInSession: the server applies a release
// and the reply is lost with the connection. go-zookeeper
// reconnects on the same session, and Unlock finds out there that the node
// is gone: it returns nil, not ErrUnavailable, and the waiter is granted.
func TestUnlock_lostReply_confirmedInSession(t *testing.T) {
	for _, tc := range []struct {
		name   string
		waiter bool
	}{
		{"waiter", true},
		{"alone", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			srv, admin, opts := sharedServer(t, ctx)
			proxy := faultproxy.Start(t, srv.Addr(), &faultproxy.Options{Protocol: faultproxy.ZooKeeper})
			conn := dialZK(t, ctx, proxy.Addr(), connOpts{timeout: 10 * time.Second})
			a := newClient(t, ctx, conn, opts)
			l := mustLock(t, ctx, a, "k")
			var w *pendingAcquire
			if tc.waiter {
				b := plainClient(t, ctx, srv.Addr(), opts)
				w = startAcquire(ctx, lockFunc(b, "k"))
				waitWaiters(t, ctx, a, "k", 1)
			}
			sid := conn.SessionID()
			drop := proxy.DropReply(func(f *faultproxy.Frame) bool {
				return f.Up && (f.Op == faultproxy.ZKOpMulti || f.Op == faultproxy.ZKOpDelete)
			}, false)

			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock whose reply was lost: %v, want nil (the node is gone and the session alive)", err)
			}
			select {
			case <-drop.Fired():
			default:
				t.Fatal("the release's reply was not dropped: the test proves nothing")
			}
			if now := conn.SessionID(); now != sid {
				t.Fatalf("session changed from 0x%x to 0x%x: the test needs it kept", sid, now)
			}
			if w != nil {
				mustUnlock(t, ctx, w.lease(t, ctx, "the waiter"))
			}
			checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, "k"))
		})
	}
}

// TestUnlock_lostReplySessionEnded_unavailable: the reply of an applied
// release is lost, its retry is held, and the session is closed meanwhile.
// The node went with the session at a moment Unlock cannot learn, so it
// reports ErrUnavailable rather than nil.
func TestUnlock_lostReplySessionEnded_unavailable(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	opts.SessionTimeout = 20 * time.Second
	proxy := faultproxy.Start(t, srv.Addr(), &faultproxy.Options{Protocol: faultproxy.ZooKeeper})
	sniff := &sessionSniffer{}
	conn := dialZK(t, ctx, proxy.Addr(), connOpts{timeout: opts.SessionTimeout, dialer: sniff.dial})
	a := newClient(t, ctx, conn, opts)
	l := mustLock(t, ctx, a, "k")
	id, passwd := sniff.session()
	release := func(f *faultproxy.Frame) bool {
		return f.Up && (f.Op == faultproxy.ZKOpMulti || f.Op == faultproxy.ZKOpDelete)
	}
	drop := proxy.DropReply(release, true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	select {
	case <-drop.Fired():
	case <-ctx.Done():
		t.Fatal("the release never reached the server (watchdog)")
	}
	closeSession(t, srv.Addr(), id, passwd)
	var got error
	select {
	case got = <-unlocked:
	case <-ctx.Done():
		t.Fatal("Unlock never returned (watchdog)")
	}
	proxy.Restore()
	t.Logf("Unlock: %v", got)
	if !errors.Is(got, dlock.ErrUnavailable) {
		t.Fatalf("Unlock = %v, want ErrUnavailable: the session ended before the release was confirmed", got)
	}
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, "k"))
}
