package etcddlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The SIGSTOP proofs: holder A, a child process, locks a key with a TTL of
// 2 s and is frozen; the parent's Lock waits until etcd has expired A's
// lease, and writes "B" through a guard; A wakes and writes "A" with its
// lease, without looking at it first, as a holder that did not notice its
// pause. Through the guard, A's write is refused and the data holds "B";
// with the guard off, A's write lands (the negative control, which shows
// that the first test would catch a broken guard).

// fenceRoles are the child roles of this package (TestMain).
var fenceRoles = map[string]testproc.Role{"fence-holder": fenceHolder}

// proofTTL is A's TTL: etcd's whole seconds, and short.
const proofTTL = 2 * time.Second

// fenceHolder is holder A. Its variables: ADDR (etcd), KEY (the lock key),
// DATA (the etcd key it writes), FENCE (the token fence's key) and GUARD,
// how it writes: "owner" (OwnerTxn), "token" (FencedTxn) or "off" (a plain
// Put). It writes "A0" while it holds, says its token, waits for "write",
// writes "A" and says "result ok", "result stale …" or "result err …".
func fenceHolder(ctx context.Context, p *testproc.Peer) error {
	addr, guard := p.Env("ADDR"), p.Env("GUARD")
	client, err := dlock.Open(ctx, "etcd://"+addr)
	if err != nil {
		return err
	}
	defer client.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	lease, err := client.Lock(ctx, p.Env("KEY"), dlock.WithTTL(proofTTL))
	if err != nil {
		return err
	}
	if err := guardedWrite(ctx, cli, lease, guard, p.Env("DATA"), p.Env("FENCE"), "A0"); err != nil {
		return fmt.Errorf("write while holding: %w", err)
	}
	p.Say("token %d", lease.Token())
	if err := p.Await("write"); err != nil {
		return err
	}
	switch err := guardedWrite(ctx, cli, lease, guard, p.Env("DATA"), p.Env("FENCE"), "A"); {
	case err == nil:
		p.Say("result ok")
	case errors.Is(err, dlock.ErrStaleToken):
		p.Say("result stale %v", err)
	default:
		p.Say("result err %v", err)
	}
	return nil
}

// guardedWrite puts v at data as guard says, with lease's ownership or
// token.
func guardedWrite(ctx context.Context, kv clientv3.KV, lease *dlock.Lease, guard, data, fence, v string) error {
	var err error
	switch guard {
	case "owner":
		_, err = etcddlock.OwnerTxn(ctx, kv, lease, clientv3.OpPut(data, v))
	case "token":
		_, err = etcddlock.FencedTxn(ctx, kv, fence, lease.Token(), clientv3.OpPut(data, v))
	case "off":
		_, err = kv.Put(ctx, data, v)
	default:
		err = fmt.Errorf("unknown guard %q", guard)
	}
	return err
}

// frozenHolder runs the proof's flow: the parent writes through guard, A as
// childGuard says, and it returns A's result line and what the data holds.
func frozenHolder(t *testing.T, guard, childGuard string) (result, data string) {
	e := newFenceEnv(t)
	fence := e.fence
	a := testproc.Start(t, "fence-holder", "ADDR="+e.srv.Addr(), "KEY="+e.key, "DATA="+e.data, "FENCE="+fence, "GUARD="+childGuard)
	tokenA, err := strconv.ParseUint(a.Expect(t, "token"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	a.Freeze(t)
	// Waits, without a timer of its own, until etcd has expired A's lease
	// and deleted its entry: A is frozen and renews nothing.
	b, err := e.c.Lock(e.ctx, e.key, dlock.WithTTL(proofTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(e.ctx)
	if b.Token() <= tokenA {
		t.Fatalf("token B %d not above token A %d", b.Token(), tokenA)
	}
	if err := guardedWrite(e.ctx, e.admin, b, guard, e.data, fence, "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	a.Thaw(t)
	a.Tell(t, "write")
	result = a.Expect(t, "result")
	t.Logf("A (token %d) after its pause, B (token %d) wrote: %s", tokenA, b.Token(), result)
	a.Wait(t)
	return result, e.value(t, e.data)
}

// A frozen holder's write, after its lease expired and B wrote, is refused
// by IsOwner (OwnerTxn) and by the token fence (FencedTxn), with
// ErrStaleToken, and the data holds "B".
func TestFence_frozenHolderRejected(t *testing.T) {
	for _, guard := range []string{"owner", "token"} {
		t.Run(guard, func(t *testing.T) {
			t.Parallel()
			result, data := frozenHolder(t, guard, guard)
			if !strings.HasPrefix(result, "stale ") {
				t.Errorf("A's write through the %s guard: %q, want refused with ErrStaleToken", guard, result)
			}
			if guard == "token" && !strings.Contains(result, "is recorded") {
				t.Errorf("A's refusal %q does not name the recorded token", result)
			}
			if data != "B" {
				t.Errorf("data = %q, want B", data)
			}
		})
	}
}

// The negative control: the same flow, B writing through the guard, A with
// a plain Put. A's stale write lands: the data holds "A".
func TestFence_noGuard_staleWriteLands(t *testing.T) {
	for _, guard := range []string{"owner", "token"} {
		t.Run(guard, func(t *testing.T) {
			t.Parallel()
			result, data := frozenHolder(t, guard, "off")
			if result != "ok" {
				t.Errorf("A's plain write: %q, want ok", result)
			}
			if data != "A" {
				t.Errorf("data = %q, want A: the stale write got through", data)
			}
		})
	}
}
