package etcddlock

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// takeCallLease returns the lease and name for one call's entry: the
// Client's shared lease of the TTL (takeLease), or with
// Options.LeasePerGrant one of the call's own, which nothing else renews
// and Close does not revoke: its grant can be renewed by reference from
// another process without renewing anybody else's entries.
func (d *etcdDriver) takeCallLease(ctx context.Context, secs int64) (*etcdLease, *slot, error) {
	if !d.opts.LeasePerGrant {
		return d.takeLease(ctx, secs)
	}
	l, err := d.grantLease(ctx, secs)
	if err != nil {
		return nil, nil, err
	}
	return l, l.takeSlot(), nil
}

// A grant's driver.GrantRef Data: its lease's id and its name's number
// on it, big-endian, then refNames, the form of the entry's name. A
// reference of refLenV0 bytes has no form byte: a gateway instance of a
// dlock before the current names granted it (`<lease, 16 hex>-<n, 8
// hex>`), and an instance of this one still renews and releases it, so
// that the instances can be upgraded one at a time.
const (
	refLenV0 = 8 + 4
	refLen   = refLenV0 + 1
	refNames = 1 // entryKey's names
)

// Ref implements driver.Referrer: with Options.LeasePerGrant a grant is
// its entry on a lease of its own, named by the lease's id and the name's
// number. A grant on the Client's shared lease cannot be renewed alone.
func (g *grant) Ref() ([]byte, bool) {
	if !g.d.opts.LeasePerGrant {
		return nil, false
	}
	data := make([]byte, refLen)
	binary.BigEndian.PutUint64(data, uint64(g.l.id))
	binary.BigEndian.PutUint32(data[8:], g.slot.n)
	data[refLenV0] = refNames
	return data, true
}

// Reattach implements driver.Reattacher, for the grants of a Client with
// Options.LeasePerGrant: their Renew keeps their lease alive and checks
// that their entry is still on it; their Release deletes the entry, if it
// is still the one granted, and revokes the lease.
func (d *etcdDriver) Reattach(ref driver.GrantRef) (driver.Grant, error) {
	v0 := len(ref.Data) == refLenV0
	if !v0 && (len(ref.Data) != refLen || ref.Data[refLenV0] != refNames) || ref.Token == 0 || ref.TTL <= 0 {
		return nil, fmt.Errorf("etcddlock: reattach: not a reference to a grant with a lease of its own")
	}
	id := clientv3.LeaseID(binary.BigEndian.Uint64(ref.Data))
	n := binary.BigEndian.Uint32(ref.Data[8:])
	dir := d.queueDir(ref.Key)
	key := entryKey(dir, id, n)
	if v0 {
		key = fmt.Sprintf("%s%016x-%08x", dir, int64(id), n)
	}
	return &refGrant{d: d, lease: id, dir: dir, key: key,
		token: int64(ref.Token), ttl: ref.TTL, validFrom: time.Now()}, nil
}

// refGrant is a grant reattached by reference: it implements driver.Grant.
type refGrant struct {
	d         *etcdDriver
	lease     clientv3.LeaseID
	dir, key  string // the queue directory, our entry
	token     int64  // our entry's create revision
	ttl       time.Duration
	validFrom time.Time
}

func (g *refGrant) Token() uint64           { return uint64(g.token) }
func (g *refGrant) ValidFrom() time.Time    { return g.validFrom }
func (g *refGrant) Validity() time.Duration { return g.ttl }
func (g *refGrant) Lost() <-chan error      { return nil }

// Renew keeps the lease alive, then checks that our entry is still on it:
// a lease outlives an entry deleted by hand.
func (g *refGrant) Renew(ctx context.Context) error {
	err := retry(ctx, func(ctx context.Context) error {
		// LeaseKeepAlive, once: etcd keeps the lease its TTL from when it
		// handles this, after the call started.
		_, err := g.d.lc.KeepAliveOnce(ctx, g.lease)
		return err
	})
	if isLeaseNotFound(err) {
		return fmt.Errorf("%w: etcd lease %x expired or was revoked", driver.ErrNotHeld, int64(g.lease))
	}
	if err != nil {
		return g.d.wrapErr("renew the lease", err)
	}
	var resp *clientv3.GetResponse
	err = retry(ctx, func(ctx context.Context) (err error) {
		// Range, our entry.
		resp, err = g.d.kv.Get(ctx, g.key, clientv3.WithKeysOnly())
		return err
	})
	if err != nil {
		return g.d.wrapErr("read the entry", err)
	}
	// Our entry's name carries the lease's id: only our join created it
	// with that revision.
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != g.token {
		return fmt.Errorf("%w: its etcd key is gone", driver.ErrNotHeld)
	}
	return nil
}

// Release deletes our entry if it is still the one granted, as the
// acquiring grant's Release does but writing no release marker (the next
// waiter, seeing the delete without one, reads the queue), then revokes
// the lease, which nobody else uses.
func (g *refGrant) Release(ctx context.Context) error {
	tail := tailKey(g.dir)
	ours := []*pb.Compare{cmpCreate(g.key, pb.Compare_EQUAL, g.token)}
	then := []*pb.RequestOp{opDelete(g.key), opTxn([]*pb.Compare{cmpMod(tail, pb.Compare_GREATER, g.token)}, nil, []*pb.RequestOp{opDelete(tail)})}
	var resp *pb.TxnResponse
	uncertain := false // a try failed after etcd may have applied it
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: if our entry is still the one we created, delete it (the
		// hand-off: the next waiter's watch fires on it); and the tail,
		// if it names us (we were the newest entry).
		resp, err = g.d.txn(ctx, ours, then, nil)
		if err != nil && !rejected(err) {
			uncertain = true
		}
		return err
	})
	if err != nil {
		return g.d.wrapErr("delete the entry", err)
	}
	alive := true
	if !resp.Succeeded && uncertain {
		// An earlier try whose reply was lost may have deleted it: the
		// release happened if the lease still lives (an entry gone with
		// an expired lease takes the lease with it).
		_, kerr := g.d.lc.KeepAliveOnce(ctx, g.lease)
		alive = kerr == nil
	}
	// LeaseRevoke: the lease served our entry alone.
	_ = retry(ctx, func(ctx context.Context) error {
		_, err := g.d.lc.Revoke(ctx, g.lease)
		if isLeaseNotFound(err) {
			return nil
		}
		return err
	})
	if !resp.Succeeded && !(uncertain && alive) {
		return fmt.Errorf("%w: its etcd key was gone already (lease expired or key deleted)", driver.ErrNotHeld)
	}
	return nil
}

// Abandon implements driver.Abandoner: a grant left to expire, or handed
// off to be renewed by reference, stops watching its entry. etcd frees
// the entry by itself when its lease lapses.
func (g *grant) Abandon(context.Context) error {
	g.stopWatch()
	return nil
}
