package etcddlock

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

	"github.com/dlockdev/dlock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The token fence keeps, at an etcd key of the caller's choosing (the fence
// key), the highest fencing token that wrote through it, as 20 decimal
// digits with leading zeros: every uint64 fits, and etcd compares values
// byte-wise, which for equal lengths is numeric order ("…09" < "…10"). A
// write passes when its token is not below the recorded one, and records its
// own, in the same Txn as the caller's operations.
//
// etcd's comparison of a Value always fails on a missing key, and a Txn's
// If has no OR, so "absent or not above" takes two levels, in one Txn:
//
//	if CreateRevision(fence) == 0:  put fence, ops…     (first write)
//	else if Value(fence) > token:   get fence           (refused: the recorded token)
//	else:                           put fence, ops…
//
// Nested Txn operations need etcd 3.3 or later. The two branches that put
// the fence and run ops exclude each other, which etcd allows (a key may be
// written in both branches of one Txn, not twice in one branch).

// fenceWidth is the number of digits of a recorded token: those of the
// largest uint64.
const fenceWidth = 20

// fenceValue encodes a token as the fence key stores it.
func fenceValue(token uint64) string { return fmt.Sprintf("%0*d", fenceWidth, token) }

// parseFenceValue decodes a fence key's value; ok is false for a value the
// guard cannot have written.
func parseFenceValue(v []byte) (token uint64, ok bool) {
	if len(v) != fenceWidth {
		return 0, false
	}
	t, err := strconv.ParseUint(string(v), 10, 64)
	return t, err == nil
}

// FenceOp returns one Txn operation that runs ops only if token is not below
// the highest token recorded at the etcd key fence, and then records token
// there; when no token is recorded yet, it runs ops and records token. Put
// it in your own Txn (beside IsOwner's comparison, for instance) and read
// its response with FenceResult; FencedTxn does both for a Txn of its own.
//
// A token equal to the recorded one passes: the same lease writes as often
// as it needs. Tokens of different keys and backends can share a fence only
// when they come from one counter (the leases of one key, or of keys whose
// tokens are known to grow together); the fence orders numbers, it does not
// know where they came from.
//
// The fence key belongs to the guard: write it only through FenceOp. A value
// of another form compares byte-wise with the token's digits, and FenceResult
// reports it when it refuses a write.
//
// It returns an error wrapping dlock.ErrInvalidFence for an empty fence key, token
// 0 (no lease's token), or an operation among ops that puts or deletes the
// fence key itself.
func FenceOp(fence string, token uint64, ops ...clientv3.Op) (clientv3.Op, error) {
	if err := checkFence("etcddlock.FenceOp", fence, token, ops); err != nil {
		return clientv3.Op{}, err
	}
	v := fenceValue(token)
	write := append([]clientv3.Op{clientv3.OpPut(fence, v)}, ops...)
	return clientv3.OpTxn(
		// No token recorded yet (the key is absent): the first write.
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(fence), "=", 0)},
		write,
		[]clientv3.Op{clientv3.OpTxn(
			// The recorded token is above ours (etcd has no "<="):
			// refused, read it, in the same revision.
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(fence), ">", v)},
			[]clientv3.Op{clientv3.OpGet(fence)},
			// Else it is not above ours.
			write)},
	), nil
}

// checkFence validates FenceOp's arguments for the call where.
func checkFence(where, fence string, token uint64, ops []clientv3.Op) error {
	switch {
	case fence == "":
		return fmt.Errorf("%s: %w: empty fence key", where, dlock.ErrInvalidFence)
	case token == 0:
		return fmt.Errorf("%s: fence %q: %w: token 0 is no lease's token", where, fence, dlock.ErrInvalidFence)
	}
	for i, op := range ops {
		// etcd refuses a Txn that writes a key twice in one branch; a
		// range that covers the fence is left to it. This check names
		// the mistake.
		if (op.IsPut() || op.IsDelete()) && len(op.RangeBytes()) == 0 && bytes.Equal(op.KeyBytes(), []byte(fence)) {
			return fmt.Errorf("%s: fence %q: %w: operation %d writes the fence key itself", where, fence, dlock.ErrInvalidFence, i)
		}
	}
	return nil
}

// FenceResult reads the response of the operation FenceOp(fence, token, ops…)
// from a Txn's Responses. If ops ran, it returns their responses, in order.
// If a higher token was recorded, nothing ran, and the error is a
// *dlock.StaleTokenError (errors.Is(err, dlock.ErrStaleToken)) with Recorded
// set to that token. When the fence key holds a value the guard cannot have
// written, nothing ran either, and the error wraps dlock.ErrInvalidFence.
//
// r must be that operation's response, from a Txn whose Then (or Else) ran:
// a Txn that did not reach the operation has no response for it.
func FenceResult(fence string, token uint64, r *pb.ResponseOp) ([]*pb.ResponseOp, error) {
	outer := r.GetResponseTxn()
	if outer == nil {
		return nil, fmt.Errorf("etcddlock.FenceResult: fence %q: %w: not the response of a FenceOp", fence, dlock.ErrInvalidFence)
	}
	if outer.Succeeded {
		return outer.Responses[1:], nil // first write: ops after the fence's put
	}
	inner := outer.Responses[0].GetResponseTxn()
	if !inner.Succeeded {
		return inner.Responses[1:], nil // not above ours: ops ran
	}
	kvs := inner.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		// Present at the outer comparison, absent at the read, in one
		// Txn: cannot happen.
		return nil, fmt.Errorf("etcddlock.FenceResult: fence %q: refused without a recorded token", fence)
	}
	recorded, ok := parseFenceValue(kvs[0].Value)
	if !ok {
		return nil, fmt.Errorf("etcddlock.FenceResult: fence %q: %w: the fence key holds %q, not a token this guard wrote; nothing was written",
			fence, dlock.ErrInvalidFence, kvs[0].Value)
	}
	return nil, &dlock.StaleTokenError{Fence: fence, Token: token, Recorded: recorded}
}

// FencedTxn runs ops in one Txn on kv behind the token fence at the etcd key
// fence (see FenceOp): they run, and token is recorded, unless a higher
// token was recorded first. It returns their responses, in order; a
// *dlock.StaleTokenError (errors.Is(err, dlock.ErrStaleToken)) with the
// recorded token when refused; an error wrapping dlock.ErrInvalidFence, without a
// request, for bad arguments; or etcd's error, wrapped: then, as with any
// etcd write whose reply was lost, ops may have run, and trying again with
// the same token is safe when ops are (an equal token passes).
//
//	resps, err := etcddlock.FencedTxn(ctx, cli, "fences/orders", lease.Token(),
//		clientv3.OpPut("orders/42", "closed"))
func FencedTxn(ctx context.Context, kv clientv3.KV, fence string, token uint64, ops ...clientv3.Op) ([]*pb.ResponseOp, error) {
	op, err := FenceOp(fence, token, ops...)
	if err != nil {
		return nil, err
	}
	// Txn: the fence's check, its record and ops, atomically (FenceOp).
	resp, err := kv.Txn(ctx).Then(op).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcddlock.FencedTxn: fence %q: %w", fence, err)
	}
	return FenceResult(fence, token, resp.Responses[0])
}
