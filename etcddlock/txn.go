package etcddlock

import (
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The Txns of the acquire and the release are built as etcd's protocol
// messages, not with clientv3's Cmp and Op, which copy every comparison
// with proto.Clone at each step (Compare, WithPrefix, OpTxn, Then, If):
// those copies were a third of the client's allocations per uncontended
// Lock and Unlock (bench/analysis.md, Profile: etcd).

// txnCallOpts are those of clientv3's default call options that matter
// here (its KV sends them with every request): wait for a connection
// rather than fail at once, and take replies of any size. Its 2 MiB limit
// on requests is left out: etcd refuses requests over 1.5 MiB by default.
var txnCallOpts = []grpc.CallOption{grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32)}

// txn sends If(cmps) Then(then) Else(els) on the driver's connection, as
// clientv3's Txn.Commit does.
func (d *etcdDriver) txn(ctx context.Context, cmps []*pb.Compare, then, els []*pb.RequestOp) (*pb.TxnResponse, error) {
	resp, err := d.kvc.Txn(ctx, &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}, txnCallOpts...)
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return resp, nil
}

// cmpCreate compares key's create revision (0: it does not exist).
func cmpCreate(key string, r pb.Compare_CompareResult, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_CREATE, Result: r, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
}

// cmpMod compares key's mod revision.
func cmpMod(key string, r pb.Compare_CompareResult, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: r, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// cmpValue compares key's value byte-wise.
func cmpValue(key string, r pb.Compare_CompareResult, v string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VALUE, Result: r, TargetUnion: &pb.Compare_Value{Value: []byte(v)}}
}

// prefixed makes c compare every key that starts with its key.
func prefixed(c *pb.Compare) *pb.Compare {
	c.RangeEnd = []byte(clientv3.GetPrefixRangeEnd(string(c.Key)))
	return c
}

// opGet reads one key.
func opGet(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}
}

// opNewest reads the limit newest keys that start with dir, by create
// revision, with their values.
func opNewest(dir string, limit int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
		Key: []byte(dir), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(dir)), Limit: limit,
		SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_CREATE,
	}}}
}

// opPut puts key on lease.
func opPut(key, value string, lease clientv3.LeaseID) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value), Lease: int64(lease)}}}
}

// opTouch puts key again with its value and lease: only its mod revision
// changes.
func opTouch(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), IgnoreValue: true, IgnoreLease: true}}}
}

// opDelete deletes one key.
func opDelete(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}
}

// opTxn nests a Txn.
func opTxn(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}}}
}
