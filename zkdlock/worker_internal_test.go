package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// A request given up on still runs to its end, counted in inflight until
// then, and its pending is reused only after that: the next requests of
// the same type get their own results, never the abandoned one's.
func TestCall_givenUp_resultNotReused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var inflight sync.WaitGroup
	release := make(chan struct{})
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := call(ctx, &inflight, 0, func() (string, error) {
			close(started)
			<-release
			return "abandoned", nil
		})
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("call after its ctx ended: %v, want context.Canceled", err)
	}
	finished := make(chan struct{})
	go func() {
		inflight.Wait()
		close(finished)
	}()
	calls := func() {
		for i := range 200 {
			want := string(rune('a' + i%26))
			got, err := call(context.Background(), nil, time.Minute, func() (string, error) { return want, nil })
			if err != nil || got != want {
				t.Fatalf("request %d: %q, %v; want %q", i, got, err, want)
			}
		}
	}
	calls() // while the request given up on still runs
	select {
	case <-finished:
		t.Fatal("inflight no longer counts a request given up on that has not returned")
	default:
	}
	close(release)
	calls() // while it returns
	wd := time.NewTimer(time.Minute)
	defer wd.Stop()
	select {
	case <-finished:
	case <-wd.C:
		t.Fatal("inflight still counts a request that returned (watchdog)")
	}
}

// A request that gets no answer within its timeout is given up on with
// errNoAnswer; call0's request returns its error.
func TestCall_timeoutAndCall0(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	_, err := call(context.Background(), nil, time.Millisecond, func() (int, error) {
		<-release
		return 1, nil
	})
	if !errors.Is(err, errNoAnswer) {
		t.Fatalf("unanswered call: %v, want errNoAnswer", err)
	}
	boom := errors.New("boom")
	if err := call0(context.Background(), nil, time.Minute, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("call0: %v, want %v", err, boom)
	}
	if err := call0(context.Background(), nil, 0, func() error { return nil }); err != nil {
		t.Fatalf("call0: %v", err)
	}
}

// workersWaiting counts the goroutines running work.
func workersWaiting() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "zkdlock.work(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Once the process's last Client has closed, no worker is left waiting
// for a request, however long workerIdle: a goroutine leak check run
// right after Close finds none.
func TestWorkers_stopAtLastClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer workerIdle.Store(workerIdle.Swap(int64(time.Hour)))
	srv := testserver.SharedZooKeeper(t)
	u, err := url.Parse(fmt.Sprintf("zk://%s/test/workers-%d", srv.Addr(), internalSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	var ds []driver.Driver
	for range 2 {
		d, err := openURL(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	for i, d := range ds {
		g, err := d.Acquire(ctx, &driver.AcquireRequest{Key: fmt.Sprintf("k%d", i), Owner: fmt.Sprintf("%032x", internalSeq.Add(1)), TTL: 10 * time.Second, Wait: true, Kind: driver.KindLock, Limit: 1, Mode: driver.Exclusive})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := ds[0].Close(); err != nil {
		t.Fatal(err)
	}
	if workersWaiting() == 0 {
		t.Fatal("no worker waits while a Client is still open: the test shows nothing")
	}
	if err := ds[1].Close(); err != nil {
		t.Fatal(err)
	}
	if n := openClients.Load(); n != 0 {
		t.Fatalf("%d drivers still open after the test closed its own (another test's Client left open?)", n)
	}
	for ctx.Err() == nil && workersWaiting() > 0 {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	if n := workersWaiting(); n > 0 {
		t.Fatalf("%d workers still wait for a request after the last Client closed", n)
	}
}
