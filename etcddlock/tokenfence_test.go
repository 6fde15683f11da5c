package etcddlock_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fencedPut writes v to the data key through the token fence at fence.
func (e *fenceEnv) fencedPut(fence string, token uint64, v string) error {
	_, err := etcddlock.FencedTxn(e.ctx, e.admin, fence, token, clientv3.OpPut(e.data, v))
	return err
}

// The token fence: the first write passes and records its token; an equal
// or higher token passes; a lower one is refused with the recorded token,
// and neither the data nor the fence changes. Tokens of different lengths
// in digits (9, then 10) compare as numbers: the fence key stores fixed-width
// decimals.
func TestFencedTxn_order(t *testing.T) {
	e := newFenceEnv(t)
	fence := "fences/" + t.Name()
	steps := []struct {
		token    uint64
		recorded uint64 // 0: the write passes
	}{
		{9, 0},  // first
		{9, 0},  // equal
		{10, 0}, // higher, one more digit
		{9, 10}, // lower
		{1, 10},
		{12, 0},
		{math.MaxUint64, 0},
		{math.MaxUint64 - 1, math.MaxUint64},
	}
	want := ""
	for i, s := range steps {
		v := fmt.Sprintf("v%d-%d", i, s.token)
		err := e.fencedPut(fence, s.token, v)
		if s.recorded == 0 {
			if err != nil {
				t.Fatalf("step %d: token %d: %v", i, s.token, err)
			}
			want = v
		} else {
			var se *dlock.StaleTokenError
			if !errors.As(err, &se) || !errors.Is(err, dlock.ErrStaleToken) || *se != (dlock.StaleTokenError{Fence: fence, Token: s.token, Recorded: s.recorded}) {
				t.Fatalf("step %d: token %d: %v, want a StaleTokenError with %d recorded", i, s.token, err, s.recorded)
			}
		}
		if got := e.value(t, e.data); got != want {
			t.Fatalf("step %d: data = %q, want %q", i, got, want)
		}
	}
	if got := e.value(t, fence); got != fmt.Sprint(uint64(math.MaxUint64)) {
		t.Fatalf("fence = %q, want the highest token", got)
	}
}

// Several operations, a delete and a nested conditional Txn among them, run
// behind the fence, and FencedTxn returns their responses in order. (etcd
// evaluates a nested Txn's comparisons on the state before the whole Txn,
// its operations after the earlier ones: the read sees the put.)
func TestFencedTxn_opsAndResponses(t *testing.T) {
	e := newFenceEnv(t)
	fence := "fences/" + t.Name()
	other := e.data + "/other"
	for _, k := range []string{e.data, other} {
		if _, err := e.admin.Put(e.ctx, k, "before"); err != nil {
			t.Fatal(err)
		}
	}
	for _, token := range []uint64{5, 6} { // first write, then the compared branch
		resps, err := etcddlock.FencedTxn(e.ctx, e.admin, fence, token,
			clientv3.OpPut(e.data, fmt.Sprint(token)),
			clientv3.OpDelete(other),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Version(e.data), ">", 0)},
				[]clientv3.Op{clientv3.OpGet(e.data)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(resps) != 3 || resps[0].GetResponsePut() == nil || resps[1].GetResponseDeleteRange() == nil {
			t.Fatalf("token %d: responses %v, want put, delete, txn", token, resps)
		}
		if kvs := resps[2].GetResponseTxn().GetResponses()[0].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Value) != fmt.Sprint(token) {
			t.Fatalf("token %d: the nested Txn read %v", token, kvs)
		}
	}
	if got := e.value(t, other); got != "" {
		t.Fatalf("deleted key holds %q", got)
	}
}

// FenceOp in a Txn of the caller's own, beside IsOwner: both checks in one
// write. After Unlock the Txn does not reach the fence; a holder's token
// below the recorded one is refused by FenceResult.
func TestFenceOp_withIsOwner(t *testing.T) {
	e := newFenceEnv(t)
	fence := "fences/" + t.Name()
	l, err := e.c.Lock(e.ctx, e.key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(token uint64, v string) (bool, error) {
		cmp, err := etcddlock.IsOwner(l)
		if err != nil {
			t.Fatal(err)
		}
		op, err := etcddlock.FenceOp(fence, token, clientv3.OpPut(e.data, v))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.admin.Txn(e.ctx).If(cmp).Then(op).Commit()
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Succeeded {
			return false, nil
		}
		_, err = etcddlock.FenceResult(fence, token, resp.Responses[0])
		return true, err
	}
	if owner, err := write(l.Token(), "held"); !owner || err != nil {
		t.Fatalf("held: owner %v, %v", owner, err)
	}
	if owner, err := write(l.Token()-1, "lower"); !owner || !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("lower token: owner %v, %v, want ErrStaleToken", owner, err)
	}
	if err := l.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	if owner, _ := write(l.Token(), "released"); owner {
		t.Fatal("released: IsOwner true")
	}
	if got := e.value(t, e.data); got != "held" {
		t.Fatalf("data = %q, want %q", got, "held")
	}
}

// Bad arguments return dlock.ErrInvalidFence naming the problem and write
// nothing: not the data, not the fence.
func TestFencedTxn_badInput(t *testing.T) {
	e := newFenceEnv(t)
	fence := "fences/" + t.Name()
	for _, tc := range []struct {
		name  string
		fence string
		token uint64
		ops   []clientv3.Op
		want  string
	}{
		{"empty fence", "", 1, []clientv3.Op{clientv3.OpPut(e.data, "x")}, "empty fence key"},
		{"token 0", fence, 0, []clientv3.Op{clientv3.OpPut(e.data, "x")}, "token 0"},
		{"puts the fence", fence, 1, []clientv3.Op{clientv3.OpPut(e.data, "x"), clientv3.OpPut(fence, "99")}, "operation 1 writes the fence key"},
		{"deletes the fence", fence, 1, []clientv3.Op{clientv3.OpDelete(fence)}, "operation 0 writes the fence key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := etcddlock.FenceOp(tc.fence, tc.token, tc.ops...); !errors.Is(err, dlock.ErrInvalidFence) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("FenceOp: %v, want dlock.ErrInvalidFence saying %q", err, tc.want)
			}
			_, err := etcddlock.FencedTxn(e.ctx, e.admin, tc.fence, tc.token, tc.ops...)
			if !errors.Is(err, dlock.ErrInvalidFence) || errors.Is(err, dlock.ErrStaleToken) {
				t.Fatalf("FencedTxn: %v, want dlock.ErrInvalidFence", err)
			}
			if d, f := e.value(t, e.data), e.value(t, fence); d != "" || f != "" {
				t.Fatalf("after bad input: data %q, fence %q; want nothing written", d, f)
			}
		})
	}
}

// A fence key that holds a value the guard did not write refuses a write
// whose digits compare below it, with dlock.ErrInvalidFence (not a stale token:
// there is no recorded token), and nothing is written.
func TestFencedTxn_foreignFenceValue(t *testing.T) {
	e := newFenceEnv(t)
	fence := "fences/" + t.Name()
	if _, err := e.admin.Put(e.ctx, fence, "garbage"); err != nil {
		t.Fatal(err)
	}
	err := e.fencedPut(fence, 7, "x")
	if !errors.Is(err, dlock.ErrInvalidFence) || errors.Is(err, dlock.ErrStaleToken) || !strings.Contains(err.Error(), `"garbage"`) {
		t.Fatalf("FencedTxn: %v, want dlock.ErrInvalidFence quoting the value", err)
	}
	if d, f := e.value(t, e.data), e.value(t, fence); d != "" || f != "garbage" {
		t.Fatalf("data %q, fence %q; want nothing written", d, f)
	}
}
