package testserver

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// clockShimSource is an LD_PRELOAD library that offsets a process's wall
// clock by an amount a test changes at run time; see its comment.
//
//go:embed testdata/clockshim.c
var clockShimSource []byte

// Clock steps the wall clock of one redis-server (StartRedisSteppedClock),
// as an NTP step would: TIME, and the expiry of keys, which Redis counts by
// its wall clock, jump; monotonic clocks do not. Nothing else on the machine
// is affected. It is safe for concurrent use.
type Clock struct {
	t      testing.TB
	addr   string
	offset *int64 // nanoseconds, in the file the server has mapped
}

// StartRedisSteppedClock is StartRedis for a server whose wall clock the
// test can step with the returned Clock. It needs a C compiler (cc) to
// build the clock library, and fails the test with the command that
// installs one when there is none.
func StartRedisSteppedClock(t testing.TB, extra ...string) (*Redis, *Clock) {
	t.Helper()
	SkipIfShort(t)
	cc := LookBinary(t, "CLOCKSHIM_CC", "cc", "apt-get install -y gcc")
	dir := t.TempDir()
	src, lib, file := filepath.Join(dir, "clockshim.c"), filepath.Join(dir, "clockshim.so"), filepath.Join(dir, "offset")
	if err := os.WriteFile(src, clockShimSource, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("testserver: build the clock library: %v\n%s", err, out)
	}
	// The offset file: one int64, mapped by the server (read-only) and by
	// the test, which changes it with an atomic store.
	if err := os.WriteFile(file, make([]byte, 8), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	_ = f.Close()
	if err != nil {
		t.Fatalf("testserver: map the clock offset file: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	r := startRedis(t, []string{"LD_PRELOAD=" + lib, "DLOCK_CLOCK_OFFSET_FILE=" + file}, extra)
	c := &Clock{t: t, addr: r.Addr(), offset: (*int64)(unsafe.Pointer(&mem[0]))}
	c.check()
	return r, c
}

// Step moves the server's wall clock by d (back when negative) from where
// it is now, at once, and checks that the server reads the new time.
func (c *Clock) Step(d time.Duration) {
	c.t.Helper()
	atomic.AddInt64(c.offset, int64(d))
	c.check()
}

// Offset returns how far the server's wall clock is from the machine's.
func (c *Clock) Offset() time.Duration { return time.Duration(atomic.LoadInt64(c.offset)) }

// check fails the test unless the server's TIME, less the offset, falls
// between two readings of this machine's clock taken around the request
// (give or take the granularity of either clock): a clock library that did
// not load would make every clock test pass vacuously.
func (c *Clock) check() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := time.Now()
	reply, err := RedisCommand(ctx, c.addr, "TIME")
	after := time.Now()
	if err != nil {
		c.t.Fatalf("testserver: TIME on %s: %v", c.addr, err)
	}
	server, err := parseTime(reply)
	if err != nil {
		c.t.Fatalf("testserver: TIME on %s: %v", c.addr, err)
	}
	unshifted := server.Add(-c.Offset())
	const slack = 50 * time.Millisecond
	if unshifted.Before(before.Add(-slack)) || unshifted.After(after.Add(slack)) {
		c.t.Fatalf("testserver: the clock of redis-server on %s reads %v, want %v (offset %v) within [%v, %v]: the clock library is not in effect",
			c.addr, server, unshifted, c.Offset(), before, after)
	}
}

// parseTime reads TIME's reply, seconds and microseconds on two lines.
func parseTime(reply string) (time.Time, error) {
	secs, usecs, ok := strings.Cut(reply, "\n")
	s, err1 := strconv.ParseInt(secs, 10, 64)
	us, err2 := strconv.ParseInt(usecs, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("unexpected TIME reply %q", reply)
	}
	return time.Unix(s, us*1000), nil
}
