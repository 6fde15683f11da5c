package etcddlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	leng "github.com/dlockdev/dlock/internal/lease"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// minKeepAliveAttempt is the shortest time a keep-alive attempt is given
// before another is sent (lease.TryTimeout's floor): below two of these
// left, the last attempt gets all that is left. A keep-alive is answered in
// a round trip to the leader, a few milliseconds on a healthy cluster.
const minKeepAliveAttempt = 200 * time.Millisecond

// renewLease renews l, by the time ctx ends (a held lease's local deadline)
// or l.safeUntil, whichever is sooner: for its held grants (RenewBatch),
// its waiters (keepAliveShared) and before a grant or a new call (freshen,
// takeLease). A keep-alive may never be answered although the cluster
// works: a follower forwards it to a leader that is frozen or cut off, and
// waits for it past the lease (a new leader is elected within one or two
// election timeouts, but the forward is not sent again); or the connection
// went silent (a dropped NAT entry, a peer gone without a reset), which
// gRPC's pings notice only after 15 s. So each attempt gets half of the
// time left (lease.TryTimeout), and the next one is sent on the other of
// two paths: the client's connection, where the request goes on a new
// stream (to the next member, with several endpoints), and a connection of
// the driver's own to one endpoint, dialled afresh, round robin, after one
// fails (spare). The lease counts from the send time of the attempt that
// was answered, never from an earlier one. It returns an error wrapping
// driver.ErrNotHeld when etcd no longer keeps the lease.
func (d *etcdDriver) renewLease(ctx context.Context, l *etcdLease) error {
	until := l.safeUntil()
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	var b backoff
	fresh := d.spare.preferred()
	for {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if share, ok := leng.TryTimeout(ctx, until, minKeepAliveAttempt); ok {
			actx, cancel = context.WithTimeout(ctx, share)
		}
		var err error
		if fresh {
			err = d.keepAliveFresh(actx, l)
		} else {
			err = l.keepAlive(actx, d.lc)
		}
		silent := actx.Err() != nil
		cancel()
		d.spare.used(fresh, err == nil)
		switch {
		case err == nil:
			d.renewDelays(ctx, l)
			return nil
		case errors.Is(err, driver.ErrNotHeld) || ctx.Err() != nil:
			return err
		case !silent && !fresh && !transient(err):
			return err
		case !silent:
			// A quick refusal ("no leader", an overloaded etcd), or a
			// spare connection that failed (closed by another renewal,
			// say: the client's connection decides): pause as every
			// retry does.
			if werr := b.wait(ctx); werr != nil {
				return fmt.Errorf("%w (last etcd error: %w)", werr, err)
			}
		case time.Until(until) <= 0:
			// No deadline on ctx, and the lease is past the point
			// where it counts: the caller decides what follows.
			return err
		}
		fresh = !fresh
	}
}

// keepAliveFresh renews l once over the driver's spare connection.
func (d *etcdDriver) keepAliveFresh(ctx context.Context, l *etcdLease) error {
	if err := l.deadErr(); err != nil {
		return err
	}
	conn, err := d.spare.conn(d.cli)
	if err != nil {
		return err
	}
	start := time.Now()
	// LeaseKeepAlive, one request on a stream of its own: served by the
	// leader without a Raft round, as keepAlive's.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	stream, err := pb.NewLeaseClient(conn).LeaseKeepAlive(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(l.id)}); err != nil {
		return err
	}
	resp, err := stream.Recv()
	if err != nil {
		return err
	}
	if resp.TTL <= 0 {
		err := fmt.Errorf("%w: etcd lease %x expired or was revoked", driver.ErrNotHeld, int64(l.id))
		l.kill(err)
		return err
	}
	l.renewedAt(start)
	return nil
}

// spareConn is the driver's connection for keep-alives that the client's
// own connection did not answer in time: dialled with the client's
// configuration (TLS, credentials, dial options) to one endpoint at a
// time, lazily, and replaced by one to the next endpoint when an attempt
// on it fails. It is safe for concurrent use.
type spareConn struct {
	mu     sync.Mutex
	cc     *grpc.ClientConn // nil until needed, and after a failure
	next   int              // the endpoint the next connection goes to
	prefer bool             // the last renewal succeeded on cc
	closed bool
}

// preferred reports whether renewals should start on the spare connection:
// the last one succeeded there, after the client's connection failed.
func (s *spareConn) preferred() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prefer
}

// used records the outcome of an attempt on the spare connection (fresh)
// or the client's: a failed spare is closed, and the next attempt there
// dials a new one.
func (s *spareConn) used(fresh, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.prefer = fresh
		return
	}
	if fresh && s.cc != nil {
		_ = s.cc.Close()
		s.cc = nil
	}
}

// conn returns the spare connection, dialling one through cli if there is
// none. grpc dials lazily: the TCP connection is made by the first request.
func (s *spareConn) conn(cli *clientv3.Client) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("etcddlock: client closed")
	}
	if s.cc != nil {
		return s.cc, nil
	}
	eps := cli.Endpoints()
	if len(eps) == 0 {
		return nil, errors.New("etcddlock: the etcd client has no endpoints")
	}
	ep := eps[s.next%len(eps)]
	s.next++
	cc, err := cli.Dial(ep)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", ep, err)
	}
	s.cc = cc
	return cc, nil
}

// close closes the spare connection, if any, for good.
func (s *spareConn) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.cc == nil {
		return nil
	}
	err := s.cc.Close()
	s.cc = nil
	return err
}
