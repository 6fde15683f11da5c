package etcddlock

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Lock-delay (driver.AcquireRequest.LockDelay; docs/etcd.md, Lock-delay).
// An entry with a delay is created with a delay record, in the same Txn,
// so at the same create revision:
//
//	<prefix><escape(K)>/<entry name>/delay-<mode><delay in ns>   value: "\x00\x01" label "\x00" metadata   lease: the delay lease
//
// The record is on a lease of its own, its entry's lease's delay lease for
// that delay (one per lease and delay, granted with the TTL of the entry's
// lease plus the delay, and kept alive right after it: renewDelays), so it
// outlives its entry by at least the delay when the entry ends other than
// by Release, and goes by itself at most that TTL plus the delay after
// its Client's last keep-alive. Revoke moves the records of the entries it
// deletes onto a lease of the delay plus a second (revokeDelays): a
// revoked holder's Client lives on and keeps its delay lease. A Release
// deletes the record in the Txn that deletes the entry, so a record whose
// entry is gone (a create revision with no entry) is an ended entry's: an
// "ended record". A waiter that reads the queue counts an ended record as
// a holder of its mode, from the first moment its client saw it until the
// delay has passed on the local clock (never earlier than the entry's
// end, which came before that read), or until the record's lease lapses;
// then it deletes the record, guarded by its mod revision, and reads the
// queue again.
//
// Why a grant never comes before the ended lease's deadline plus the
// delay: a grant's validity counts from before its lease's keep-alive was
// sent, and the delay lease's keep-alive is sent once that one was
// answered (and freshen, RenewBatch check that it was), so etcd keeps the
// record at least the delay after the deadline; and a waiter that saw the
// record counts the delay from after the entry's end.
//
// A waiter that dies while it sits out a delay leaves the record in place:
// the next one to read the queue counts the delay again from when it sees
// it, at most until the record's lease lapses. So a delay is never cut
// short by a crash, and made longer by at most the lease's TTL.
//
// The name carries the mode and the delay, so that reads of keys alone
// (a lock's and a permit's) see them. The value starts with NUL 0x01,
// below every kind's entries and above the markers' empty values, so
// that no comparison of a join takes a record for an entry of its kind or
// a directory holding one for empty: a join behind a record goes the way
// of a queue without a tail (behind) and a try reads the queue. The label
// in the value is the kind's witness for behind; the metadata lets Inspect
// show the ended entry as the holder it still counts as.
//
// An entry without a delay writes no record: its requests are those of a
// key that never had one, and reads skip records as they skip markers.

// delaySuffix starts the name of a delay record after its entry's key.
const delaySuffix = "/delay-"

// delayKey returns the delay record of entry, for mode m and delay d.
func delayKey(entry string, m driver.Mode, d time.Duration) string {
	return entry + delaySuffix + string(modeByte(m)) + strconv.FormatInt(int64(d), 10)
}

// delayValue is what a delay record of label stores.
func delayValue(label string, md []byte) string {
	if len(md) == 0 {
		md = []byte("{}")
	}
	return "\x00\x01" + label + "\x00" + string(md)
}

// parseDelayValue splits a delay record's value into label and metadata.
func parseDelayValue(v []byte) (label string, md []byte) {
	rest, _ := bytes.CutPrefix(v, []byte("\x00\x01"))
	l, md, _ := bytes.Cut(rest, []byte{0})
	return string(l), md
}

// parseDelay reads the etcd key of a delay record of the queue dir: the
// entry's key, its mode and its delay. ok is false for any other key.
func parseDelay(dir, etcdKey string) (entry string, m driver.Mode, d time.Duration, ok bool) {
	i := strings.LastIndex(etcdKey, delaySuffix)
	if i < 0 || !isEntry(dir, etcdKey[:i]) {
		return "", 0, 0, false
	}
	rest := etcdKey[i+len(delaySuffix):]
	if rest == "" {
		return "", 0, 0, false
	}
	switch rest[0] {
	case 'x':
		m = driver.Exclusive
	case 's':
		m = driver.Shared
	default:
		return "", 0, 0, false
	}
	n, err := strconv.ParseInt(rest[1:], 10, 64)
	if err != nil || n <= 0 {
		return "", 0, 0, false
	}
	return etcdKey[:i], m, time.Duration(n), true
}

// delayRecord returns the delay record our entry is created with, or ""
// when it has no delay.
func (a *attempt) delayRecord() string {
	if a.req.LockDelay <= 0 {
		return ""
	}
	return delayKey(a.key, a.req.Mode, a.req.LockDelay)
}

// putDelay creates our delay record with our entry, if we have a delay.
func (a *attempt) putDelay() []*pb.RequestOp {
	if k := a.delayRecord(); k != "" {
		return []*pb.RequestOp{opPut(k, delayValue(a.label, a.req.Metadata), a.dl.id)}
	}
	return nil
}

// delayLease returns l's delay lease for delay, if it has a live one.
func (l *etcdLease) delayLease(delay time.Duration) *etcdLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if dl := l.delays[delay]; dl != nil && dl.dead == nil {
		return dl
	}
	return nil
}

// takeDelayLease returns the lease that our delay record goes on: l's
// delay lease for our delay, granted if l has none alive, with l's TTL
// plus the delay, so that it lapses no earlier than the delay after l
// does when both are last renewed together.
func (a *attempt) takeDelayLease(ctx context.Context) error {
	l := a.l
	if dl := l.delayLease(a.req.LockDelay); dl != nil {
		a.dl = dl
		return nil
	}
	dl, err := a.d.grantLease(ctx, seconds(l.ttl+a.req.LockDelay))
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.delays[a.req.LockDelay]; old != nil && old.deadErr() == nil {
		// Another call granted one meanwhile: ours lapses unused.
		a.dl = old
		return nil
	}
	if l.delays == nil {
		l.delays = map[time.Duration]*etcdLease{}
	}
	l.delays[a.req.LockDelay] = dl
	a.dl = dl
	return nil
}

// renewDelays renews l's delay leases, after a keep-alive of l was
// answered: each then lapses no earlier than its delay after l. A delay
// lease that failed keeps its older renewal; the grants on it see that
// (RenewBatch, freshen). A lapsed one is forgotten: the next call with
// that delay grants another.
func (d *etcdDriver) renewDelays(ctx context.Context, l *etcdLease) {
	l.mu.Lock()
	if len(l.delays) == 0 {
		l.mu.Unlock()
		return
	}
	dls := make([]*etcdLease, 0, len(l.delays))
	for _, dl := range l.delays {
		dls = append(dls, dl)
	}
	l.mu.Unlock()
	for _, dl := range dls {
		if err := d.renewLease(ctx, dl); errors.Is(err, driver.ErrNotHeld) {
			l.mu.Lock()
			for k, v := range l.delays {
				if v == dl {
					delete(l.delays, k)
				}
			}
			l.mu.Unlock()
		}
	}
}

// renewedDelay checks that dl, a delay lease of a grant or call on l, was
// renewed no earlier than since (l's renewal that the validity counts
// from), renewing it if not. A lease that etcd dropped took the record
// with it: driver.ErrNotHeld.
func (d *etcdDriver) renewedDelay(ctx context.Context, dl *etcdLease, since time.Time) error {
	if dl == nil {
		return nil
	}
	if err := dl.deadErr(); err != nil {
		return err
	}
	if !dl.since().Before(since) {
		return nil
	}
	return d.renewLease(ctx, dl)
}

// revokeDelays returns, for the ended records of entries that a Revoke
// deletes (records, read with the queue), the operations that put each
// on a lease of its delay plus a second, granted here, each guarded by
// its mod revision: the revoked holder's Client lives on and would keep
// them on its delay lease.
func (d *etcdDriver) revokeDelays(ctx context.Context, records []*mvccpb.KeyValue, dir string) ([]*pb.Compare, []*pb.RequestOp, error) {
	if len(records) == 0 {
		return nil, nil, nil
	}
	var longest time.Duration
	for _, kv := range records {
		_, _, delay, _ := parseDelay(dir, string(kv.Key))
		longest = max(longest, delay)
	}
	// The second covers the time from the grant of the lease, where its
	// TTL starts, to the Txn.
	l, err := d.grantLease(ctx, seconds(longest+time.Second))
	if err != nil {
		return nil, nil, err
	}
	var cmps []*pb.Compare
	var puts []*pb.RequestOp
	for _, kv := range records {
		cmps = append(cmps, cmpMod(string(kv.Key), pb.Compare_EQUAL, kv.ModRevision))
		puts = append(puts, opPut(string(kv.Key), string(kv.Value), l.id))
	}
	return cmps, puts, nil
}

// endedRecords returns the ended records among kvs, a read of a queue
// (delay records whose entry, at the same create revision, is not among
// kvs), by key.
func endedRecords(dir string, kvs []*mvccpb.KeyValue) map[string]*mvccpb.KeyValue {
	var ended map[string]*mvccpb.KeyValue
	for _, kv := range kvs {
		if _, _, _, ok := parseDelay(dir, string(kv.Key)); ok {
			if ended == nil {
				ended = map[string]*mvccpb.KeyValue{}
			}
			ended[string(kv.Key)] = kv
		}
	}
	for _, kv := range kvs {
		if !isEntry(dir, string(kv.Key)) {
			continue
		}
		for k, r := range ended {
			if r.CreateRevision == kv.CreateRevision && strings.HasPrefix(k, string(kv.Key)+delaySuffix) {
				delete(ended, k)
			}
		}
	}
	return ended
}

// endedEntries remembers when this client first saw each ended record,
// so that a delay counts from then for every call of the client (a
// TryLock repeated, a waiter that read the queue again).
type endedEntries struct {
	mu   sync.Mutex
	seen map[endedID]time.Time // guarded by mu
}

// endedID names an ended record: its key and create revision (a name can
// be used again by a later entry).
type endedID struct {
	key string
	rev int64
}

// until returns when the delay of the ended record kv is over: its delay
// after the first time this client saw it.
func (e *endedEntries) until(kv *mvccpb.KeyValue, d time.Duration) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if e.seen == nil {
		e.seen = map[endedID]time.Time{}
	}
	id := endedID{string(kv.Key), kv.CreateRevision}
	first, ok := e.seen[id]
	if !ok {
		first = now
		e.seen[id] = now
		// Forget records seen longer ago than any delay lasts: another
		// client deleted them, or will find them over.
		for k, t := range e.seen {
			if now.Sub(t) > 2*driver.MaxLockDelay {
				delete(e.seen, k)
			}
		}
	}
	return first.Add(d)
}

// forget drops records this client deleted.
func (e *endedEntries) forget(kvs []*mvccpb.KeyValue) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, kv := range kvs {
		delete(e.seen, endedID{string(kv.Key), kv.CreateRevision})
	}
}

// sitOut handles the ended records among the entries a scan read ahead of
// ours: those whose delay is over are deleted (one Txn, each guarded by
// its mod revision: a record that changed is not the one we timed), and
// it reports true: the queue is then read again. Else a.delayUntil is when
// the first of the others is over, for the wait to wake then.
func (a *attempt) sitOut(ctx context.Context, ahead []*mvccpb.KeyValue) (again bool, err error) {
	a.delayUntil = time.Time{}
	var cmps []*pb.Compare
	var dels []*pb.RequestOp
	var over []*mvccpb.KeyValue
	now := time.Now()
	for _, kv := range ahead {
		_, _, d, ok := parseDelay(a.dir, string(kv.Key))
		if !ok {
			continue
		}
		switch until := a.d.ended.until(kv, d); {
		case !until.After(now):
			cmps = append(cmps, cmpMod(string(kv.Key), pb.Compare_EQUAL, kv.ModRevision))
			dels = append(dels, opDelete(string(kv.Key)))
			over = append(over, kv)
		case a.delayUntil.IsZero() || until.Before(a.delayUntil):
			a.delayUntil = until
		}
	}
	if len(dels) == 0 {
		return false, nil
	}
	// Txn: if the ended records are as read, delete them: their delays
	// are over. A record deleted by another waiter fails the comparison;
	// the read that follows sees what is left.
	err = retry(ctx, func(ctx context.Context) error {
		_, err := a.d.txn(ctx, cmps, dels, nil)
		return err
	})
	if err != nil {
		return false, a.d.wrapErr("end a lock-delay", err)
	}
	a.d.ended.forget(over)
	return true, nil
}

// phantom is the queue.Entry of an ended record read with a queue: a
// holder of its mode, of the queue's kind, until its delay is over.
func (a *attempt) phantom(m driver.Mode) queue.Entry {
	return queue.Entry{Mode: m, Label: a.label}
}

// inspectDelays returns, for a read of the queue dir, the delay of each
// entry that has one, and when the last delay of an ended entry now in
// force ends by this client's count (zero if none).
func (d *etcdDriver) inspectDelays(dir string, kvs []*mvccpb.KeyValue) (map[string]time.Duration, time.Time) {
	delays := map[string]time.Duration{}
	ended := endedRecords(dir, kvs)
	var until time.Time
	for _, kv := range kvs {
		entry, _, delay, ok := parseDelay(dir, string(kv.Key))
		if !ok {
			continue
		}
		if _, gone := ended[string(kv.Key)]; !gone {
			delays[entry] = delay
			continue
		}
		if u := d.ended.until(kv, delay); u.After(time.Now()) && u.After(until) {
			until = u
		}
	}
	return delays, until
}

// dropDelay deletes our delay record, if we have one, for a call that
// gives up: before its entry, whose name the lease may lend again at once.
// Best effort: a record left behind delays the next grant, never hastens
// it.
func (a *attempt) dropDelay(ctx context.Context) {
	if k := a.delayRecord(); k != "" {
		_ = retry(ctx, func(ctx context.Context) error {
			// Txn: delete our delay record.
			_, err := a.d.txn(ctx, nil, []*pb.RequestOp{opDelete(k)}, nil)
			return err
		})
	}
}

// withDelays completes info, built by describe from entries, with each
// entry's lock-delay and the delay in force.
func withDelays(info *driver.LockInfo, entries []*mvccpb.KeyValue, delays map[string]time.Duration, until time.Time) {
	for i := range info.Holders {
		if d, ok := delays[string(entries[i].Key)]; ok {
			info.Holders[i].LockDelay = d
		}
	}
	for i := range info.Waiters {
		info.Waiters[i].LockDelay = delays[string(entries[len(info.Holders)+i].Key)]
	}
	info.DelayedUntil = until
}
