package zkdlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
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
