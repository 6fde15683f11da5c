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
// fence key itself: alone, in a range (WithPrefix, WithRange, WithFromKey)
// or in a nested Txn. (A range delete of it would erase the fence in the
// same Txn that records the token, and etcd accepts that.)
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
		if writesKey(op, []byte(fence)) {
			return fmt.Errorf("%s: fence %q: %w: operation %d writes the fence key itself", where, fence, dlock.ErrInvalidFence, i)
		}
	}
	return nil
}

// writesKey reports whether op, or an operation of a Txn nested in it at
// any depth, puts or deletes key, alone or in a range. etcd does not catch
// all of these: it refuses a Txn that puts a key twice ("duplicate key
// given in txn request"), but applies a range delete that covers a key put
// earlier in the same branch, which would erase the fence (the next write,
// of any token, would then be a first write) and report success.
func writesKey(op clientv3.Op, key []byte) bool {
	if op.IsTxn() {
		_, then, els := op.Txn()
		for _, o := range append(then, els...) {
			if writesKey(o, key) {
				return true
			}
		}
		return false
	}
	if !op.IsPut() && !op.IsDelete() {
		return false
	}
	return inRange(op.KeyBytes(), op.RangeBytes(), key)
}

// inRange reports whether key is in etcd's range [begin, end): the key
// begin alone when end is empty, every key from begin on when end is
// "\x00" (WithFromKey; with begin "\x00" too, every key).
func inRange(begin, end, key []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(begin, key)
	case bytes.Equal(end, []byte{0}):
		return bytes.Compare(begin, key) <= 0
	}
	return bytes.Compare(begin, key) <= 0 && bytes.Compare(key, end) < 0
}

// FenceResult reads the response of the operation FenceOp(fence, token, ops…)
// from a Txn's Responses. If ops ran, it returns their responses, in order.
// If a higher token was recorded, nothing ran, and the error is a
// *dlock.StaleTokenError (errors.Is(err, dlock.ErrStaleToken)) with Recorded
// set to that token. When the fence key holds a value the guard cannot have
// written, nothing ran either, and the error wraps dlock.ErrInvalidFence.
// A response that is not a FenceOp's returns an error wrapping
// dlock.ErrInvalidFence, too.
//
// r must be that operation's response, from a Txn whose Then (or Else) ran:
// a Txn that did not reach the operation has no response for it.
func FenceResult(fence string, token uint64, r *pb.ResponseOp) ([]*pb.ResponseOp, error) {
	// The shape FenceOp's Txn answers with (see the package comment
	// above): outer succeeded, [put fence, ops…]; else [inner], and inner
	// succeeded, [get fence] (refused), or not, [put fence, ops…]. Any
	// other is the response of another operation: a caller's mistake,
	// reported, never read as a verdict.
	notOurs := fmt.Errorf("etcddlock.FenceResult: fence %q: %w: not the response of a FenceOp", fence, dlock.ErrInvalidFence)
	outer := r.GetResponseTxn()
	if outer == nil {
		return nil, notOurs
	}
	if outer.Succeeded {
		return written(outer.Responses, notOurs) // first write
	}
	if len(outer.Responses) != 1 || outer.Responses[0].GetResponseTxn() == nil {
		return nil, notOurs
	}
	inner := outer.Responses[0].GetResponseTxn()
	if !inner.Succeeded {
		return written(inner.Responses, notOurs) // not above ours: ops ran
	}
	if len(inner.Responses) != 1 || inner.Responses[0].GetResponseRange() == nil {
		return nil, notOurs
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

// written returns the responses of the caller's ops from those of a
// branch that put the fence first and ran them, or notOurs if rs does not
// start with a put.
func written(rs []*pb.ResponseOp, notOurs error) ([]*pb.ResponseOp, error) {
	if len(rs) == 0 || rs[0].GetResponsePut() == nil {
		return nil, notOurs
	}
	return rs[1:], nil
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
