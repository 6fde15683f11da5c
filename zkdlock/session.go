package zkdlock

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// sessionInfo learns, from the connections go-zookeeper dials, what it does
// not report: the session timeout the server granted (which is the lease
// length and must not be guessed) and why the last dial failed (for error
// messages).
type sessionInfo struct {
	timeoutMs atomic.Int64 // negotiated session timeout; 0 until a session exists

	mu      sync.Mutex
	lastErr error // last dial error; guarded by mu
}

// dial is a zk.Dialer.
func (s *sessionInfo) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		return nil, err
	}
	return &sniffConn{Conn: c, info: s}, nil
}

func (s *sessionInfo) lastDialErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// timeout returns the negotiated session timeout, or 0.
func (s *sessionInfo) timeout() time.Duration {
	return time.Duration(s.timeoutMs.Load()) * time.Millisecond
}

// sniffConn reads the first packet the server sends on a connection, the
// ConnectResponse of ZooKeeper's handshake:
//
//	int32 length | int32 protocolVersion | int32 timeOut | int64 sessionId | buffer passwd
//
// and records timeOut unless sessionId is 0 (the server's way of saying the
// session expired). It passes everything through unchanged. Only
// go-zookeeper's reading goroutine calls Read, one at a time.
type sniffConn struct {
	net.Conn
	info *sessionInfo
	buf  []byte
	done bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 {
			size := int(binary.BigEndian.Uint32(c.buf))
			if len(c.buf) >= 4+size {
				body := c.buf[4 : 4+size]
				if len(body) >= 16 {
					timeout := int32(binary.BigEndian.Uint32(body[4:8]))
					sid := int64(binary.BigEndian.Uint64(body[8:16]))
					if sid != 0 && timeout > 0 {
						c.info.timeoutMs.Store(int64(timeout))
					}
				}
				c.done, c.buf = true, nil
			}
		}
	}
	return n, err
}

// quickRetry is go-zookeeper's DNSHostProvider, except that after losing a
// working connection it tries every server once at once, before falling back
// to go-zookeeper's pause of one second between rounds. With a single server
// the stock provider pauses before the very first reconnect, which costs a
// lease whose session timeout is short.
type quickRetry struct {
	zk.HostProvider
	mu    sync.Mutex
	fresh bool // a connection worked since the last pause; guarded by mu
}

func (h *quickRetry) Next() (string, bool) {
	s, retryStart := h.HostProvider.Next()
	h.mu.Lock()
	defer h.mu.Unlock()
	if retryStart && h.fresh {
		h.fresh, retryStart = false, false
	}
	return s, retryStart
}

func (h *quickRetry) Connected() {
	h.mu.Lock()
	h.fresh = true
	h.mu.Unlock()
	h.HostProvider.Connected()
}

// slogger sends go-zookeeper's messages (connection attempts, reconnects) to
// slog's default logger at debug level: normally silent, visible to whoever
// turns debug logging on.
type slogger struct{}

func (slogger) Printf(format string, args ...any) {
	slog.Debug("zkdlock: " + fmt.Sprintf(format, args...))
}

// connect opens a zk.Conn to servers and waits until it has a session, the
// server refuses our credentials, ctx ends or connectTimeout passes.
func connect(ctx context.Context, servers []string, sessionTimeout, connectTimeout time.Duration) (*zk.Conn, *sessionInfo, error) {
	addr := strings.Join(servers, ",")
	info := &sessionInfo{}
	events := make(chan zk.State, 1)
	conn, _, err := zk.Connect(servers, sessionTimeout,
		zk.WithLogger(slogger{}),
		zk.WithLogInfo(false),
		zk.WithDialer(info.dial),
		zk.WithHostProvider(&quickRetry{HostProvider: zk.NewDNSHostProvider()}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type != zk.EventSession || (ev.State != zk.StateHasSession && ev.State != zk.StateAuthFailed) {
				return
			}
			select { // the callback must not block
			case events <- ev.State:
			default:
			}
		}))
	if err != nil {
		// The host provider resolves every name first.
		return nil, nil, fmt.Errorf("%w: zookeeper at %s: %w", driver.ErrUnavailable, addr, err)
	}
	timer := time.NewTimer(connectTimeout)
	defer timer.Stop()
	fail := func(err error) (*zk.Conn, *sessionInfo, error) {
		conn.Close()
		return nil, nil, err
	}
	select {
	case st := <-events:
		if st == zk.StateAuthFailed {
			return fail(fmt.Errorf("%w: zookeeper at %s (check the user and password in the URL)", driver.ErrAuth, addr))
		}
		return conn, info, nil
	case <-ctx.Done():
		return fail(noSession(addr, "no session before the context ended", "", ctx.Err(), info.lastDialErr()))
	case <-timer.C:
		return fail(noSession(addr, fmt.Sprintf("no session within connect_timeout=%v", connectTimeout), " (is ZooKeeper running and reachable there?)", info.lastDialErr()))
	}
}

// noSession is the error of a connect that got no session: what says why it
// gave up, causes (nil ones skipped) are wrapped, and hint ends the text.
func noSession(addr, what, hint string, causes ...error) error {
	format, args := "%w: zookeeper at %s: %s", []any{driver.ErrUnavailable, addr, what}
	for _, c := range causes {
		if c != nil {
			format += ": %w"
			args = append(args, c)
		}
	}
	return fmt.Errorf(format+"%s", append(args, hint)...)
}
