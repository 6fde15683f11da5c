package zkdlock

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
)

func fixedLag(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// An answered request counts only once a request through the leader sent
// lag after its reply (after the end of its bucket) succeeded: before, the
// follower may not have reported it to the leader yet.
func TestHeard_answeredCountsOnlyOnceProved(t *testing.T) {
	const lag = 100 * time.Millisecond
	h := newHeard(1280*time.Millisecond, fixedLag(lag)) // buckets of 10 ms
	const sid = 7
	s0 := time.Now()
	r0 := s0.Add(3 * time.Millisecond)
	h.answered(sid, s0, r0)
	if _, ok := h.since(sid); ok {
		t.Fatal("an answered request counts before anything went through the leader")
	}
	// A request through the leader sent less than lag after the reply
	// proves nothing: the follower's next ping reply may still be to come.
	h.viaLeader(sid, r0.Add(lag/2))
	if _, ok := h.since(sid); ok {
		t.Fatal("a request through the leader sent lag/2 after the reply proved it")
	}
	// Nor does one sent lag after the reply but before the end of its
	// bucket plus lag (the bucket's requests count as answered at its end).
	at := h.provableAt(r0)
	if at.Before(r0.Add(lag)) {
		t.Fatalf("provableAt(%v) = %v, before the reply + lag", r0, at)
	}
	h.viaLeader(sid, at.Add(-time.Nanosecond))
	if _, ok := h.since(sid); ok {
		t.Fatal("a request through the leader sent before provableAt proved it")
	}
	h.viaLeader(sid, at)
	if got, ok := h.since(sid); !ok || !got.Equal(s0) {
		t.Fatalf("since = %v, %v; want the answered request's send time %v", got, ok, s0)
	}
	// The latest proved request wins; an older one proves nothing new.
	s1 := s0.Add(50 * time.Millisecond)
	h.answered(sid, s1, s1.Add(time.Millisecond))
	h.answered(sid, s0.Add(-time.Second), s0.Add(-time.Second))
	h.viaLeader(sid, h.provableAt(s1.Add(time.Millisecond)))
	if got, _ := h.since(sid); !got.Equal(s1) {
		t.Fatalf("since = %v, want %v", got, s1)
	}
	if sent, _, ok := h.last(sid); !ok || !sent.Equal(s1) {
		t.Fatalf("last = %v, %v; want %v", sent, ok, s1)
	}
}

// A standalone server expires sessions itself: an answered request counts
// at once, from its send time (the rule before ensembles were considered).
func TestHeard_standaloneCountsAnsweredAtOnce(t *testing.T) {
	h := newHeard(time.Second, fixedLag(0))
	s := time.Now()
	h.answered(1, s, s.Add(time.Millisecond))
	if got, ok := h.since(1); !ok || !got.Equal(s) {
		t.Fatalf("since = %v, %v; want %v", got, ok, s)
	}
	if at := h.provableAt(s); !at.Equal(s) {
		t.Fatalf("provableAt = %v, want the reply itself", at)
	}
}

// A handshake makes the leader touch the session itself (createSession,
// revalidation): it counts at once from when the dial began.
func TestHeard_handshakeCountsAtOnce(t *testing.T) {
	h := newHeard(time.Second, fixedLag(time.Hour))
	at := time.Now()
	h.leaderTouched(3, at)
	if got, ok := h.since(3); !ok || !got.Equal(at) {
		t.Fatalf("since = %v, %v; want %v", got, ok, at)
	}
}

// A new session starts afresh, and late reports of the one before are
// ignored: what the leader heard of one session says nothing of another.
func TestHeard_newSessionStartsAfresh(t *testing.T) {
	h := newHeard(time.Second, fixedLag(0))
	s := time.Now()
	h.answered(1, s, s)
	h.leaderTouched(2, s.Add(time.Second))
	if _, ok := h.since(1); ok {
		t.Fatal("session 1 still known after session 2 began")
	}
	h.answered(1, s.Add(2*time.Second), s.Add(2*time.Second)) // late, of the old session
	if got, ok := h.since(2); !ok || !got.Equal(s.Add(time.Second)) {
		t.Fatalf("since(2) = %v, %v after a late report of session 1", got, ok)
	}
	if _, ok := h.since(0); ok {
		t.Fatal("session 0 (none) known")
	}
}

// A request answered in a bucket that was reused before it was proved (more
// than a session timeout ago) is forgotten, never credited to the newer
// bucket's requests or the other way round.
func TestHeard_reusedBucketForgetsTheOlder(t *testing.T) {
	h := newHeard(1280*time.Millisecond, fixedLag(time.Millisecond)) // 10 ms buckets
	old := h.base.Add(5 * time.Millisecond)
	h.answered(1, old, old)
	newer := old.Add(heardBuckets * h.res) // same slot, 128 buckets later
	h.answered(1, newer, newer)
	h.answered(1, old.Add(-time.Millisecond), old) // a late report into the reused slot
	h.viaLeader(1, h.provableAt(newer))
	if got, _ := h.since(1); !got.Equal(newer) {
		t.Fatalf("since = %v, want the newer request %v", got, newer)
	}
}

// frame is a ZooKeeper reply frame: length, xid, zxid, err, and a body.
func frame(xid int32, body int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(16+body))
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint64(b, 42)
	b = binary.BigEndian.AppendUint32(b, 0)
	return append(b, make([]byte, body)...)
}

type nopConn struct{ net.Conn }

func (nopConn) Write(p []byte) (int, error) { return len(p), nil }

// The sniffer reports a successful handshake as a touch by the leader from
// when the dial began, and pairs the session's pings with their replies
// however the stream is cut, skipping other frames.
func TestSniffConn_handshakeAndPings(t *testing.T) {
	info := &sessionInfo{heard: newHeard(1280*time.Millisecond, fixedLag(0))}
	dialed := time.Now().Add(-time.Second)
	c := &sniffConn{Conn: nopConn{}, info: info, dialed: dialed}
	// ConnectResponse: protocolVersion, timeOut 1000, sessionId 9, passwd.
	hs := binary.BigEndian.AppendUint32(nil, 0)
	hs = binary.BigEndian.AppendUint32(hs, 1000)
	hs = binary.BigEndian.AppendUint64(hs, 9)
	hs = binary.BigEndian.AppendUint32(hs, 2)
	hs = append(hs, 1, 2)
	hs = append(binary.BigEndian.AppendUint32(nil, uint32(len(hs))), hs...)
	c.handshake(hs[:5])
	c.handshake(hs[5:])
	if got, ok := info.heard.since(9); !ok || !got.Equal(dialed) {
		t.Fatalf("after the handshake since = %v, %v; want the dial %v", got, ok, dialed)
	}
	if info.timeout() != time.Second {
		t.Fatalf("timeout = %v", info.timeout())
	}
	before := time.Now()
	if _, err := c.Write(zkPing); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(frame(5, 3)[:12]); err != nil { // a request, not a ping
		t.Fatal(err)
	}
	stream := append(frame(5, 300), frame(-1, 40)...) // a reply, a watch event
	stream = append(stream, frame(-2, 0)...)          // the ping's reply
	for len(stream) > 0 {                             // in chunks of 7 bytes
		n := min(7, len(stream))
		c.follow(stream[:n])
		stream = stream[n:]
	}
	if got, _ := info.heard.since(9); got.Before(before) {
		t.Fatalf("after the ping's reply since = %v, want the ping's send time (after %v)", got, before)
	}
	if c.lost || len(c.pings) != 0 {
		t.Fatalf("lost %v, pings left %d", c.lost, len(c.pings))
	}
}
