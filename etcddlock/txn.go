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

// keyOrValue is a key or value of etcd's messages: a string is copied into
// each message built from it; bytes are shared, so a key that a request
// names several times (our entry, the tail) is converted once.
type keyOrValue interface{ ~string | ~[]byte }

// Each helper allocates its message with the oneof wrappers it points to in
// one struct: a Lock and Unlock builds about twenty of them.

// cmpCreate compares key's create revision (0: it does not exist).
func cmpCreate[K keyOrValue](key K, r pb.Compare_CompareResult, rev int64) *pb.Compare {
	m := new(struct {
		c pb.Compare
		u pb.Compare_CreateRevision
	})
	m.u.CreateRevision = rev
	m.c.Key, m.c.Target, m.c.Result, m.c.TargetUnion = []byte(key), pb.Compare_CREATE, r, &m.u
	return &m.c
}

// cmpMod compares key's mod revision.
func cmpMod[K keyOrValue](key K, r pb.Compare_CompareResult, rev int64) *pb.Compare {
	m := new(struct {
		c pb.Compare
		u pb.Compare_ModRevision
	})
	m.u.ModRevision = rev
	m.c.Key, m.c.Target, m.c.Result, m.c.TargetUnion = []byte(key), pb.Compare_MOD, r, &m.u
	return &m.c
}

// cmpValue compares key's value byte-wise.
func cmpValue[K keyOrValue](key K, r pb.Compare_CompareResult, v string) *pb.Compare {
	m := new(struct {
		c pb.Compare
		u pb.Compare_Value
	})
	m.u.Value = []byte(v)
	m.c.Key, m.c.Target, m.c.Result, m.c.TargetUnion = []byte(key), pb.Compare_VALUE, r, &m.u
	return &m.c
}

// prefixed makes c compare every key that starts with its key.
func prefixed(c *pb.Compare) *pb.Compare {
	c.RangeEnd = prefixEnd(c.Key)
	return c
}

// prefixEnd is clientv3.GetPrefixRangeEnd, from bytes to bytes: the end of
// the range of keys that start with prefix.
func prefixEnd(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] < 0xff {
			end := append([]byte(nil), prefix[:i+1]...)
			end[i]++
			return end
		}
	}
	return []byte{0} // every key: the prefix is all 0xff, or empty
}

// opGet reads one key.
func opGet[K keyOrValue](key K) *pb.RequestOp {
	m := new(struct {
		op pb.RequestOp
		u  pb.RequestOp_RequestRange
		r  pb.RangeRequest
	})
	m.r.Key = []byte(key)
	m.u.RequestRange, m.op.Request = &m.r, &m.u
	return &m.op
}

// opNewest reads the limit newest keys that start with dir, by create
// revision, with their values.
func opNewest(dir string, limit int64) *pb.RequestOp {
	op := opGet(dir)
	r := op.GetRequestRange()
	r.RangeEnd, r.Limit = prefixEnd(r.Key), limit
	r.SortOrder, r.SortTarget = pb.RangeRequest_DESCEND, pb.RangeRequest_CREATE
	return op
}

// opPut puts key on lease.
func opPut[K, V keyOrValue](key K, value V, lease clientv3.LeaseID) *pb.RequestOp {
	m := new(struct {
		op pb.RequestOp
		u  pb.RequestOp_RequestPut
		p  pb.PutRequest
	})
	m.p.Key, m.p.Value, m.p.Lease = []byte(key), []byte(value), int64(lease)
	m.u.RequestPut, m.op.Request = &m.p, &m.u
	return &m.op
}

// opDelete deletes one key.
func opDelete[K keyOrValue](key K) *pb.RequestOp {
	m := new(struct {
		op pb.RequestOp
		u  pb.RequestOp_RequestDeleteRange
		d  pb.DeleteRangeRequest
	})
	m.d.Key = []byte(key)
	m.u.RequestDeleteRange, m.op.Request = &m.d, &m.u
	return &m.op
}

// opTxn nests a Txn.
func opTxn(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.RequestOp {
	m := new(struct {
		op pb.RequestOp
		u  pb.RequestOp_RequestTxn
		t  pb.TxnRequest
	})
	m.t.Compare, m.t.Success, m.t.Failure = cmps, then, els
	m.u.RequestTxn, m.op.Request = &m.t, &m.u
	return &m.op
}
