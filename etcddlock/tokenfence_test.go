package etcddlock_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
	fence := e.fence
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
	fence := e.fence
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
	fence := e.fence
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
	// '~' sorts above every other test's keys: the range deletes below
	// cover this fence and nothing of theirs, were they ever sent.
	fence := "~fences/" + t.Name()
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
		// Writes of the fence in a nested Txn or a range, which
		// checkFence once let through to etcd. etcd refuses a nested put
		// ("duplicate key given in txn request", which FencedTxn reports
		// as a write of unknown outcome), but applies a range delete that
		// covers the fence after the fence's put: FencedTxn succeeded
		// and the fence was gone, so that the next write of any token
		// passed as a first write. Pinned: these cases failed with
		// "FenceOp: <nil>" before checkFence looked into nested Txns and
		// ranges.
		{"nested Txn puts the fence", fence, 1, []clientv3.Op{clientv3.OpPut(e.data, "x"),
			clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut(fence, "99")}, nil)}, "operation 1 writes the fence key"},
		{"nested Else deletes the fence", fence, 1, []clientv3.Op{
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Version(e.data), ">", 0)}, nil,
				[]clientv3.Op{clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpDelete(fence)}, nil)})}, "operation 0 writes the fence key"},
		{"prefix delete covers the fence", fence, 1, []clientv3.Op{clientv3.OpDelete("~fences/", clientv3.WithPrefix())}, "operation 0 writes the fence key"},
		{"from-key delete covers the fence", fence, 1, []clientv3.Op{clientv3.OpDelete(fence, clientv3.WithFromKey())}, "operation 0 writes the fence key"},
		{"range delete covers the fence", fence, 1, []clientv3.Op{clientv3.OpDelete(fence, clientv3.WithRange(fence+"\x00"))}, "operation 0 writes the fence key"},
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
	fence := e.fence
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

// Operations next to the fence key that do not write it pass the argument
// check: a range delete that ends at the fence key (its end is exclusive)
// or covers other keys only, and a nested Txn that reads the fence key.
func TestFencedTxn_opsNearTheFence(t *testing.T) {
	e := newFenceEnv(t)
	fence := e.fence
	below := fence[:len(fence)-1] // sorts just below the fence key
	if _, err := e.admin.Put(e.ctx, below, "x"); err != nil {
		t.Fatal(err)
	}
	resps, err := etcddlock.FencedTxn(e.ctx, e.admin, fence, 3,
		clientv3.OpPut(e.data, "v"),
		clientv3.OpDelete(below, clientv3.WithRange(fence)),
		clientv3.OpDelete(e.data+"/", clientv3.WithPrefix()),
		clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpGet(fence)}, nil))
	if err != nil {
		t.Fatalf("FencedTxn: %v", err)
	}
	if n := resps[1].GetResponseDeleteRange().GetDeleted(); n != 1 {
		t.Errorf("the range delete below the fence deleted %d keys, want 1", n)
	}
	if kvs := resps[3].GetResponseTxn().GetResponses()[0].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Value) != "00000000000000000003" {
		t.Errorf("the nested read of the fence: %v, want the token just recorded", kvs)
	}
	if got := e.value(t, e.data); got != "v" {
		t.Errorf("data = %q, want v", got)
	}
}

// FenceResult given a response that is not a FenceOp's (the Txn's other
// operation, an Else branch's nested Txn, nothing) returns
// dlock.ErrInvalidFence, never a verdict, and does not panic. Pinned: it
// indexed the responses without looking, and these cases panicked
// ("slice bounds out of range", "nil pointer dereference").
func TestFenceResult_notAFenceOpResponse(t *testing.T) {
	txn := func(ok bool, rs ...*pb.ResponseOp) *pb.ResponseOp {
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: &pb.TxnResponse{Succeeded: ok, Responses: rs}}}
	}
	get := &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{}}}
	put := &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}}
	for _, tc := range []struct {
		name string
		r    *pb.ResponseOp
	}{
		{"nil", nil},
		{"a get", get},
		{"an empty Txn, succeeded", txn(true)},
		{"an empty Txn, failed", txn(false)},
		{"a Txn of a get", txn(true, get)},
		{"a failed Txn of a get", txn(false, get)},
		{"a failed Txn of an empty Txn", txn(false, txn(false))},
		{"a failed Txn of a succeeded empty Txn", txn(false, txn(true))},
		{"a failed Txn of a Txn of a put, succeeded", txn(false, txn(true, put))},
		{"two nested Txns", txn(false, txn(false, put), txn(false, put))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := etcddlock.FenceResult("fences/x", 1, tc.r)
			if !errors.Is(err, dlock.ErrInvalidFence) || errors.Is(err, dlock.ErrStaleToken) || rs != nil {
				t.Fatalf("FenceResult = %v, %v; want dlock.ErrInvalidFence", rs, err)
			}
		})
	}
}
