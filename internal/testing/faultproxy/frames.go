package faultproxy

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
)

// Protocol tells the proxy how to cut a byte stream into requests and
// replies, so that faults can target one request ("drop the reply to the
// next acquire script") rather than a random byte.
type Protocol int

const (
	// Raw passes bytes through in the chunks they arrive in.
	Raw Protocol = iota
	// RESP is Redis' protocol (RESP2 and RESP3).
	RESP
	// ZooKeeper is ZooKeeper's length-prefixed jute protocol.
	ZooKeeper
)

// Frame is one request or reply seen by the proxy.
type Frame struct {
	Up   bool   // client to server
	Conn uint64 // connection number, from 1
	// Index is the frame's position on its connection: among client
	// frames, or (RESP) among replies that are not pushes. The reply to
	// the RESP request of Index i has Index i.
	Index int
	At    int64 // when the proxy read it (Options.Clock)
	Data  []byte

	// RESP requests: the command and its arguments. RESP replies: Push is
	// set for RESP3 out-of-band pushes (Pub/Sub messages), which answer no
	// request.
	Args []string
	Push bool

	// ZooKeeper. The first frame of each direction is the session
	// handshake: Handshake is set, and the reply carries SessionID,
	// Passwd and Timeout (ms). Later requests carry XID and Op; replies
	// carry XID, Zxid and Err (0 = ok).
	Handshake bool
	XID       int32
	Op        int32
	Zxid      int64
	Err       int32
	Path      string // requests that name a node
	SessionID int64
	Passwd    []byte
	Timeout   int32
}

// Command returns the upper-cased RESP command name, or "".
func (f *Frame) Command() string {
	if len(f.Args) == 0 {
		return ""
	}
	return strings.ToUpper(f.Args[0])
}

// ZooKeeper opcodes the scenarios target.
const (
	ZKOpCreate          = 1
	ZKOpDelete          = 2
	ZKOpExists          = 3
	ZKOpGetData         = 4
	ZKOpSetData         = 5
	ZKOpSync            = 9
	ZKOpPing            = 11
	ZKOpGetChildren2    = 12
	ZKOpMulti           = 14
	ZKOpCreate2         = 15
	ZKOpCreateContainer = 19
	ZKOpClose           = -11
)

// frameLen returns the length of the first complete frame in b, 0 when b
// holds none yet, or -1 when b cannot be parsed.
func frameLen(p Protocol, b []byte) int {
	switch p {
	case RESP:
		return respLen(b, 0)
	case ZooKeeper:
		if len(b) < 4 {
			return 0
		}
		n := int(binary.BigEndian.Uint32(b))
		if n < 0 || n > 64<<20 {
			return -1
		}
		if len(b) < 4+n {
			return 0
		}
		return 4 + n
	}
	if len(b) == 0 {
		return 0
	}
	return len(b)
}

// respLen returns the length of the RESP value at the start of b.
func respLen(b []byte, depth int) int {
	if depth > 64 {
		return -1
	}
	if len(b) == 0 {
		return 0
	}
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return 0
	}
	line := string(b[1:i])
	head := i + 2
	switch b[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return head
	case '$', '!', '=':
		n, err := strconv.Atoi(line)
		if err != nil {
			return -1
		}
		if n < 0 {
			return head
		}
		if len(b) < head+n+2 {
			return 0
		}
		return head + n + 2
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(line)
		if err != nil {
			return -1
		}
		if n < 0 {
			return head
		}
		if b[0] == '%' || b[0] == '|' {
			n *= 2
		}
		if b[0] == '|' {
			n++ // an attribute precedes the value it describes
		}
		off := head
		for range n {
			l := respLen(b[off:], depth+1)
			if l <= 0 {
				return l
			}
			off += l
		}
		return off
	}
	return -1
}

// respArgs decodes a client request: an array of bulk strings.
func respArgs(b []byte) []string {
	if len(b) == 0 || b[0] != '*' {
		return nil
	}
	i := bytes.Index(b, []byte("\r\n"))
	n, err := strconv.Atoi(string(b[1:i]))
	if err != nil || n <= 0 {
		return nil
	}
	args := make([]string, 0, n)
	off := i + 2
	for range n {
		if off >= len(b) || b[off] != '$' {
			return args
		}
		j := bytes.Index(b[off:], []byte("\r\n"))
		l, err := strconv.Atoi(string(b[off+1 : off+j]))
		if err != nil || l < 0 {
			return args
		}
		start := off + j + 2
		args = append(args, string(b[start:start+l]))
		off = start + l + 2
	}
	return args
}

// decode fills in the protocol fields of f. index is the number of frames
// seen before it in the same direction of the same connection.
func decode(p Protocol, f *Frame, index int) {
	switch p {
	case RESP:
		if f.Up {
			f.Args = respArgs(f.Data)
		} else {
			f.Push = len(f.Data) > 0 && f.Data[0] == '>'
		}
	case ZooKeeper:
		body := f.Data[4:]
		if index == 0 {
			f.Handshake = true
			// ConnectResponse: protocolVersion, timeOut, sessionId, passwd.
			if !f.Up && len(body) >= 20 {
				f.Timeout = int32(binary.BigEndian.Uint32(body[4:]))
				f.SessionID = int64(binary.BigEndian.Uint64(body[8:]))
				n := int(binary.BigEndian.Uint32(body[16:]))
				if n >= 0 && len(body) >= 20+n {
					f.Passwd = append([]byte(nil), body[20:20+n]...)
				}
			}
			return
		}
		if len(body) >= 8 {
			f.XID = int32(binary.BigEndian.Uint32(body))
		}
		if f.Up && len(body) >= 8 {
			f.Op = int32(binary.BigEndian.Uint32(body[4:]))
			// Most requests start with the path they act on.
			if rest := body[8:]; len(rest) >= 4 && f.Op != ZKOpPing && f.Op != ZKOpClose {
				n := int(int32(binary.BigEndian.Uint32(rest)))
				if n >= 0 && len(rest) >= 4+n {
					f.Path = string(rest[4 : 4+n])
				}
			}
		}
		if !f.Up && len(body) >= 16 {
			f.Zxid = int64(binary.BigEndian.Uint64(body[4:]))
			f.Err = int32(binary.BigEndian.Uint32(body[12:]))
		}
	}
}

// ZKFirstOp returns the opcode a ZooKeeper request acts with: its own, or
// for a multi the opcode of its first operation.
func (f *Frame) ZKFirstOp() int32 {
	if f.Op != ZKOpMulti {
		return f.Op
	}
	// multi: header (xid, type), then per operation a MultiHeader
	// (type int32, done bool, err int32) and the operation's request.
	if len(f.Data) < 4+8+4 {
		return 0
	}
	return int32(binary.BigEndian.Uint32(f.Data[12:]))
}

// answers reports whether reply answers req on the same connection. For
// RESP, replies come in request order: the proxy matches them by position.
func zkAnswers(req, reply *Frame) bool {
	return !reply.Handshake && reply.XID == req.XID
}
