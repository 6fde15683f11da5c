package zkdlock

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
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
// length and must not be guessed), why the last dial failed (for error
// messages), and for heard when session handshakes began and when the
// session's pings were sent and answered.
type sessionInfo struct {
	timeoutMs atomic.Int64 // negotiated session timeout; 0 until a session exists
	heard     *heard       // nil: nothing to report to
	// conns counts the connections that got a session: it goes up before
	// go-zookeeper sends any request on a new connection (see
	// zkDriver.connGen).
	conns atomic.Uint64
	// live is the connection that got session number conns, for dropConn.
	live atomic.Pointer[liveConn]
	// tls, if not nil, makes every connection TLS (zks://); names maps the
	// addresses go-zookeeper dials (it resolves host names first) back to
	// the names in the URL, to verify certificates against.
	tls   *tls.Config
	names map[string]string

	mu      sync.Mutex
	lastErr error // last dial error; guarded by mu
}

// dial is a zk.Dialer.
func (s *sessionInfo) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	start := time.Now()
	c, err := net.DialTimeout(network, addr, timeout)
	if err == nil && s.tls != nil {
		c, err = s.handshake(c, addr, start.Add(timeout))
	}
	if err != nil {
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		return nil, err
	}
	// Over TLS, sniffConn reads and writes the plain ZooKeeper protocol.
	return &sniffConn{Conn: c, info: s, dialed: start}, nil
}

// handshake runs the TLS handshake on c before deadline (the dial's), and
// closes c if it fails.
func (s *sessionInfo) handshake(c net.Conn, addr string, deadline time.Time) (net.Conn, error) {
	cfg := s.tls
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = s.names[addr]
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
	}
	tc := tls.Client(c, cfg)
	_ = c.SetDeadline(deadline)
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}

// serverNames maps each address that servers' host names resolve to
// (host:port, as go-zookeeper dials) to the name, for certificate checks.
// A name that does not resolve is left out: go-zookeeper will not dial it.
func serverNames(ctx context.Context, servers []string) map[string]string {
	names := make(map[string]string)
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil || net.ParseIP(host) != nil {
			continue
		}
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if _, ok := names[net.JoinHostPort(a, port)]; !ok {
				names[net.JoinHostPort(a, port)] = host
			}
		}
	}
	return names
}

// liveConn is a connection that got a session, numbered as conns counts.
type liveConn struct {
	gen uint64
	c   net.Conn
}

// dropConn closes connection number gen if go-zookeeper is still on it:
// go-zookeeper then fails the requests in flight on it with
// ErrConnectionClosed and reconnects at once (quickRetry), keeping the
// session if the server still has it. A later connection stays.
func (s *sessionInfo) dropConn(gen uint64) {
	if l := s.live.Load(); l != nil && l.gen == gen {
		_ = l.c.Close()
	}
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
// session expired). A handshake that succeeded also tells heard that the
// server that expires sessions touched the session after the dial began
// (it creates or revalidates the session before answering). After the
// handshake it follows the frames only to pair the
// session's pings (xid -2, sent by go-zookeeper every third of the session
// timeout, answered in order) with their replies for heard: an idle Client
// has nothing else to show that its session was touched recently. It
// passes everything through unchanged.
//
// It also buffers what it reads: go-zookeeper's reader asks for each
// frame's 4-byte length and then for the frame, setting a read deadline
// before and clearing it after, which unbuffered is two reads and two
// deadline changes per reply or notification. Read fills rbuf with one read
// of the connection, and a read deadline is set on the connection only
// when a read of it is due, as the latest SetReadDeadline asked: a read
// served from rbuf cannot block, so no deadline applies to it.
//
// Only go-zookeeper's reading goroutine calls Read and SetReadDeadline, one
// at a time; only its sending goroutine calls Write.
type sniffConn struct {
	net.Conn
	info   *sessionInfo
	dialed time.Time // when the dial began
	buf    []byte
	done   bool

	// rbuf[rpos:rend] is read from the connection and not yet returned;
	// rerr is the error that came with it, returned once rbuf is empty.
	rbuf       []byte
	rpos, rend int
	rerr       error
	// dl is the read deadline asked for; dlSet, the one set on Conn.
	dl, dlSet time.Time

	// Read side, after the handshake: the session, and where the reader
	// is in the current frame (its first 8 bytes, length and xid, are
	// gathered in hdr; skip bytes of its body remain).
	sid  int64
	hdr  [8]byte
	nhdr int
	skip int
	lost bool // a frame could not be parsed: stop following

	pingMu sync.Mutex
	pings  []time.Time // send times of the pings not answered yet; guarded by pingMu
}

// maxPings bounds the pings waiting for a reply. A ping that is not
// recorded only makes a later reply pair with an older ping, which is
// conservative (an earlier send time); so is a ping whose reply never
// comes (a proxy dropped it).
const maxPings = 64

// zkPing is a ping as go-zookeeper writes it: length 8, xid -2, opcode 11.
var zkPing = []byte{0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11}

func (c *sniffConn) Write(p []byte) (int, error) {
	if c.info.heard != nil && bytes.Equal(p, zkPing) {
		c.pingMu.Lock()
		if len(c.pings) < maxPings {
			c.pings = append(c.pings, time.Now())
		}
		c.pingMu.Unlock()
	}
	return c.Conn.Write(p)
}

// readBufSize is sniffConn's read buffer: a reply to a listing of a few
// dozen waiters, and the replies and notifications that arrive together.
const readBufSize = 16 << 10

// SetReadDeadline records the deadline for the next read of the
// connection (see sniffConn).
func (c *sniffConn) SetReadDeadline(t time.Time) error {
	c.dl = t
	return nil
}

// SetDeadline sets the write deadline and records the read deadline.
func (c *sniffConn) SetDeadline(t time.Time) error {
	c.dl = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *sniffConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.rpos == c.rend && c.rerr != nil {
		err := c.rerr
		c.rerr = nil
		c.noteReadErr(err)
		return 0, err
	}
	if c.rpos == c.rend {
		if !c.dl.Equal(c.dlSet) {
			if err := c.Conn.SetReadDeadline(c.dl); err != nil {
				return 0, err
			}
			c.dlSet = c.dl
		}
		if c.rbuf == nil {
			c.rbuf = make([]byte, readBufSize)
		}
		c.rpos = 0
		c.rend, c.rerr = c.Conn.Read(c.rbuf)
		if c.rend == 0 {
			err := c.rerr
			c.rerr = nil
			c.noteReadErr(err)
			return 0, err
		}
	}
	n := copy(p, c.rbuf[c.rpos:c.rend])
	c.rpos += n
	if n > 0 {
		if c.done {
			c.follow(p[:n])
		} else {
			c.handshake(p[:n])
		}
	}
	return n, nil
}

// noteReadErr records why a connection failed before its session, for
// Open's error: a TLS server that refuses the client's certificate says so
// here.
func (c *sniffConn) noteReadErr(err error) {
	if err != nil && !c.done {
		c.info.mu.Lock()
		c.info.lastErr = fmt.Errorf("%s before the session handshake: %w", c.RemoteAddr(), err)
		c.info.mu.Unlock()
	}
}

// handshake gathers the first packet.
func (c *sniffConn) handshake(b []byte) {
	c.buf = append(c.buf, b...)
	if len(c.buf) < 4 {
		return
	}
	size := int(binary.BigEndian.Uint32(c.buf))
	if len(c.buf) < 4+size {
		return
	}
	body := c.buf[4 : 4+size]
	if len(body) >= 16 {
		timeout := int32(binary.BigEndian.Uint32(body[4:8]))
		sid := int64(binary.BigEndian.Uint64(body[8:16]))
		if sid != 0 && timeout > 0 {
			c.info.timeoutMs.Store(int64(timeout))
			c.info.live.Store(&liveConn{gen: c.info.conns.Add(1), c: c.Conn})
			c.sid = sid
			if c.info.heard != nil {
				c.info.heard.leaderTouched(sid, c.dialed)
			}
		}
	}
	rest := c.buf[4+size:]
	c.done, c.buf = true, nil
	if len(rest) > 0 {
		c.follow(rest)
	}
}

// follow reads the frames after the handshake for ping replies.
func (c *sniffConn) follow(b []byte) {
	if c.info.heard == nil || c.sid == 0 || c.lost {
		return
	}
	for len(b) > 0 {
		if c.skip > 0 {
			n := min(c.skip, len(b))
			c.skip -= n
			b = b[n:]
			continue
		}
		n := copy(c.hdr[c.nhdr:], b)
		c.nhdr += n
		b = b[n:]
		if c.nhdr < len(c.hdr) {
			return
		}
		size := int(int32(binary.BigEndian.Uint32(c.hdr[:4])))
		xid := int32(binary.BigEndian.Uint32(c.hdr[4:]))
		if size < 4 {
			c.lost = true
			return
		}
		c.nhdr, c.skip = 0, size-4
		if xid == -2 {
			c.pingAnswered()
		}
	}
}

// pingAnswered pairs a ping reply with the oldest ping not answered yet.
func (c *sniffConn) pingAnswered() {
	c.pingMu.Lock()
	if len(c.pings) == 0 {
		c.pingMu.Unlock()
		return
	}
	sent := c.pings[0]
	c.pings = c.pings[1:]
	c.pingMu.Unlock()
	c.info.heard.answered(c.sid, sent, time.Now())
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

// zkLogger sends go-zookeeper's messages (failed dials, broken connections:
// go-zookeeper reports what it then recovers from) to the Client's logger
// (dlock.WithLogger), which dlock.NewClient hands the driver through
// SetLogger. Until then, and by default, they are dropped: never stderr,
// which is where go-zookeeper's own default logger writes.
type zkLogger struct {
	l atomic.Pointer[slog.Logger] // nil: drop
}

func (z *zkLogger) Printf(format string, args ...any) {
	l := z.l.Load()
	if l == nil || !l.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	l.Warn("zkdlock: " + fmt.Sprintf(format, args...))
}

// connect opens a zk.Conn to servers and waits until it has a session, the
// server refuses our credentials, ctx ends or connectTimeout passes.
func connect(ctx context.Context, servers []string, sessionTimeout, connectTimeout time.Duration, info *sessionInfo, log *zkLogger) (*zk.Conn, *sessionInfo, error) {
	addr := strings.Join(servers, ",")
	events := make(chan zk.State, 1)
	conn, _, err := zk.Connect(servers, sessionTimeout,
		zk.WithLogger(log),
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
		last, hint := info.lastDialErr(), " (is ZooKeeper running and reachable there?)"
		if info.tls != nil {
			hint = " (is it ZooKeeper's secure client port? does it want a client certificate: cert= and key=?)"
			if errors.As(last, new(*tls.CertificateVerificationError)) {
				hint = " (check cacert, the CA that signed the server's certificate, and server_name, a name in it)"
			}
		}
		return fail(noSession(addr, fmt.Sprintf("no session within connect_timeout=%v", connectTimeout), hint, last))
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
