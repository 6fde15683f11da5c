package redisdlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// childRoles are the parts of tests that run in a child process (TestMain).
var childRoles = map[string]testproc.Role{"fence-holder": fenceHolder}

// fenceHolder is holder A of the fencing proof: it takes KEY with a 1 s
// TTL, says its token, and waits for "write". Then — frozen and thawed in
// between, its lease long gone — it writes "A" to DATA at once, as a holder
// that did not notice the loss would: through the fence FENCE when GUARD is
// "on", by a plain SET otherwise. It reports "result ok", "result stale …"
// or "result err …".
func fenceHolder(ctx context.Context, p *testproc.Peer) error {
	rdb := redis.NewClient(&redis.Options{Addr: p.Env("ADDR")})
	defer rdb.Close()
	client, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		return err
	}
	defer client.Close()
	lease, err := client.Lock(ctx, p.Env("KEY"), dlock.WithTTL(time.Second))
	if err != nil {
		return err
	}
	p.Say("token %d", lease.Token())
	if err := p.Await("write"); err != nil {
		return err
	}
	// No look at lease.Done: this is the holder that believes it still
	// holds the key.
	if p.Env("GUARD") == "on" {
		err = redisdlock.NewFence(rdb, p.Env("FENCE")).Set(ctx, lease.Token(), p.Env("DATA"), "A", 0)
	} else {
		err = rdb.Set(ctx, p.Env("DATA"), "A", 0).Err()
	}
	switch {
	case err == nil:
		p.Say("result ok")
	case errors.Is(err, dlock.ErrStaleToken):
		p.Say("result stale %v", err)
	default:
		p.Say("result err %v", err)
	}
	return nil
}

// frozenHolderRun plays the frozen-holder proof: child A holds the key and is
// frozen (SIGSTOP) past its TTL; the parent's Lock waits until the server
// lets A's lease run out, takes the key with a higher token and writes "B"
// through the fence; A is thawed and writes "A" with its old token, through
// the fence if guard. It returns A's result line and what the data holds.
func frozenHolderRun(t *testing.T, guard bool) (result, data string) {
	ctx := testCtx(t)
	name := strings.ReplaceAll(t.Name(), "/", "-")
	key, fence, dataKey := name+"/job", "{"+name+"}", "{"+name+"}:order"
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	t.Cleanup(func() {
		_ = rdb.Del(context.Background(), dataKey, redisdlock.FenceKeyPrefix+fence).Err()
		_ = rdb.Close()
	})
	on := "off"
	if guard {
		on = "on"
	}
	a := testproc.Start(t, "fence-holder", "ADDR="+exampleAddr, "KEY="+key, "FENCE="+fence, "DATA="+dataKey, "GUARD="+on)
	tokA, err := strconv.ParseUint(a.Expect(t, "token"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	a.Freeze(t)

	// B: Lock returns once A's lease has run out on the server (A cannot
	// renew while frozen); no sleep, the call itself waits, bounded by ctx.
	b := newTestClient(t, ctx, exampleAddr, nil)
	lease, err := b.Lock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	if lease.Token() <= tokA {
		t.Fatalf("B's token %d is not above A's %d", lease.Token(), tokA)
	}
	if err := redisdlock.NewFence(rdb, fence).Set(ctx, lease.Token(), dataKey, "B", 0); err != nil {
		t.Fatalf("B's fenced write: %v", err)
	}

	a.Thaw(t)
	a.Tell(t, "write")
	result = a.Expect(t, "result")
	a.Wait(t)
	t.Logf("A (token %d) after B (token %d): %s", tokA, lease.Token(), result)
	return result, get(t, ctx, rdb, dataKey)
}

// The fence refuses the frozen holder's late write: A's result is a stale
// token error and the data holds B's value.
func TestFence_frozenHolderRejected(t *testing.T) {
	result, data := frozenHolderRun(t, true)
	if !strings.HasPrefix(result, "stale ") || !strings.Contains(result, "is recorded") {
		t.Errorf("A's write through the fence: %q, want refused as stale", result)
	}
	if data != "B" {
		t.Errorf("data holds %q, want B", data)
	}
}

// Negative control: the same run with A writing by a plain SET. Its stale
// write lands over B's — what the fence is for, and proof that the test
// above would catch a fence that let A through.
func TestFence_noGuard_staleWriteLands(t *testing.T) {
	result, data := frozenHolderRun(t, false)
	if result != "ok" {
		t.Errorf("A's plain SET: %q, want ok", result)
	}
	if data != "A" {
		t.Errorf("data holds %q, want A: the stale write should have landed", data)
	}
}
