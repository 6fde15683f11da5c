package zkrace

import "testing"

// Others drops only go-zookeeper's lastZxid race (a report as the race
// detector printed it), and keeps any other.
func TestOthers(t *testing.T) {
	const upstream = `==================
WARNING: DATA RACE
Write at 0x00c0002ed080 by goroutine 138:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c
  github.com/go-zookeeper/zk.(*Conn).loop.func2()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:474 +0x1c4

Previous read at 0x00c0002ed080 by goroutine 117:
  github.com/go-zookeeper/zk.(*Conn).sendSetWatches()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:614 +0x49d
  github.com/go-zookeeper/zk.(*Conn).loop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:484 +0x54b
==================
`
	const ours = `==================
WARNING: DATA RACE
Write at 0x00c000123456 by goroutine 12:
  github.com/dlockdev/dlock/zkdlock.(*attempt).forget()
      /src/zkdlock/acquire.go:211 +0x44

Previous read at 0x00c000123456 by goroutine 9:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c
==================
`
	if got := Others(upstream); len(got) != 0 {
		t.Errorf("the upstream race was kept: %q", got)
	}
	if got := Others(upstream + ours + upstream); len(got) != 1 {
		t.Errorf("kept %d reports of upstream+ours+upstream, want 1 (ours)", len(got))
	}
	if got := Others("plain stderr, no race"); len(got) != 0 {
		t.Errorf("kept %q from stderr without a race", got)
	}
}
