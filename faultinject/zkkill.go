package faultinject

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// KillZKSession ends a ZooKeeper session from outside its client, as
// Curator's KillSession test helper does: it opens a second connection with
// the session's id and password (which the proxy reads from the handshake)
// and sends closeSession. The server deletes the session's ephemeral nodes
// and the client learns, on its next contact, that its session expired.
func KillZKSession(addr string, sessionID int64, passwd []byte) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId,
	// passwd.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 30000)
	req = binary.BigEndian.AppendUint64(req, uint64(sessionID))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	if err := writeFrame(c, req); err != nil {
		return err
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("zk kill session: handshake: %w", err)
	}
	if len(resp) < 16 || int64(binary.BigEndian.Uint64(resp[8:])) != sessionID {
		return fmt.Errorf("zk kill session: session 0x%x not reopened (already expired?)", sessionID)
	}
	// closeSession: xid 1, opcode -11.
	body := binary.BigEndian.AppendUint32(nil, 1)
	body = binary.BigEndian.AppendUint32(body, uint32(0xffffffff-10)) // -11
	if err := writeFrame(c, body); err != nil {
		return err
	}
	if _, err := readFrame(c); err != nil && err != io.EOF {
		return fmt.Errorf("zk kill session: close: %w", err)
	}
	return nil
}

func writeFrame(w io.Writer, b []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}
