package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Lock-delay (driver.AcquireRequest.LockDelay) on ZooKeeper. An ephemeral
// node says nothing once it is gone, and nobody writes anything when a
// session expires, so an entry with a delay keeps a persistent mark beside
// its lock node, holding its metadata (see untilData):
//
//	<root>/<escaped key>/delay-<owner>-<delay in ms>-<x|s>
//
// created in the create's multi (one transaction with the lock node: any
// listing that shows the node shows its mark) and deleted in the release's
// multi (one transaction with the node's delete). So a mark whose owner has
// no lock node in a listing, an orphan, is an entry that ended other than
// by Release: its session expired, an operator revoked it, or it was a
// waiter that died (which costs a needless delay; a waiter that gives up
// deletes its mark). An orphan counts as a holder of its mode ahead of
// every node, and an entry it keeps from being granted sits out the delay
// on its local clock, from the moment it first saw the orphan, then deletes
// the mark and lists again (see sitOut). A grantee that dies while sitting
// out deletes nothing: the mark stays, and the next grantee sits out the
// whole delay again from the moment it sees it (later than needed, never
// earlier). Keys nobody uses with a delay have no marks, and cost nothing
// more: the name check in a listing's parse, no request.
//
// A waiter granted by an event, without a listing, cannot see orphans that
// appeared since its listing; they can only come from the entries ahead of
// it, whose marks that listing showed. A waiter whose listing showed a mark
// ahead of it or an orphan therefore lists once more before it takes the
// key (see handOff), and take applies the rule with the orphans.

// markPrefix starts the name of a mark; no lock node's tag is "delay".
const markPrefix = "delay-"

// mark is a parsed mark: the lock-delay of the entry of owner, of mode.
type mark struct {
	name  string
	owner string
	delay time.Duration
	mode  driver.Mode
}

// markName is the name of the mark of owner's entry, of mode m, with
// lock-delay delay.
func markName(owner string, delay time.Duration, m driver.Mode) string {
	c := "x"
	if m == driver.Shared {
		c = "s"
	}
	return markPrefix + owner + "-" + strconv.FormatInt(delay.Milliseconds(), 10) + "-" + c
}

// parseMark reverses markName.
func parseMark(name string) (mark, bool) {
	rest, ok := strings.CutPrefix(name, markPrefix)
	if !ok {
		return mark{}, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 || !validOwner(parts[0]) {
		return mark{}, false
	}
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > driver.MaxLockDelay {
		return mark{}, false
	}
	m := driver.Exclusive
	switch parts[2] {
	case "x":
	case "s":
		m = driver.Shared
	default:
		return mark{}, false
	}
	return mark{name: name, owner: parts[0], delay: time.Duration(ms) * time.Millisecond, mode: m}, true
}

// marks returns the marks among a key node's children: nil, without
// allocating, when there are none.
func marks(children []string) []mark {
	var ms []mark
	for _, c := range children {
		if strings.HasPrefix(c, markPrefix) {
			if m, ok := parseMark(c); ok {
				ms = append(ms, m)
			}
		}
	}
	return ms
}

// orphans returns the marks of ms whose owner has no node in q, except
// self's (an attempt whose node went with its session keeps its mark for
// the node it makes next).
func orphans(ms []mark, q []lockNode, self string) []mark {
	var out []mark
	for _, m := range ms {
		if m.owner != self && !ownerIn(q, m.owner) {
			out = append(out, m)
		}
	}
	return out
}

func ownerIn(q []lockNode, owner string) bool {
	for _, n := range q {
		if n.owner == owner {
			return true
		}
	}
	return false
}

// markAhead reports whether ms has an orphan, or a mark of a node ahead of
// q[mine]: an entry whose end could start a delay before our grant.
func markAhead(ms []mark, q []lockNode, mine int, self string) bool {
	for _, m := range ms {
		if m.owner != self && !ownerIn(q[mine:], m.owner) {
			return true
		}
	}
	return false
}

// grantedBehind returns how many entries at the head of q are granted when
// the orphans os hold ahead of them (grantedPrefix, with os counted).
func grantedBehind(os []mark, q []lockNode, limit int) int {
	s, x := 0, 0
	for _, o := range os {
		if o.mode == driver.Shared {
			s++
		} else {
			x++
		}
	}
	for i, n := range q {
		if !driver.Admits(limit, n.mode, s, x) {
			return i
		}
		if n.mode == driver.Shared {
			s++
		} else {
			x++
		}
	}
	return len(q)
}

// markPath is the path of this attempt's mark.
func (a *attempt) markPath() string {
	return a.keyPath + "/" + markName(a.req.Owner, a.req.LockDelay, a.req.Mode)
}

// dropMark deletes this attempt's mark, if it has one: the attempt ends
// without a grant, which starts no delay.
func (a *attempt) dropMark(ctx context.Context) error {
	if a.req.LockDelay == 0 {
		return nil
	}
	path := a.markPath()
	err := call0(ctx, nil, a.d.timeout(), func() error { return a.d.conn.Delete(path, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// sitOut waits out the lock-delay of the orphans os, which keep our node
// from being granted, from the moment this attempt first saw each, then
// deletes their marks, so that the listing run makes next grants us. It
// first writes when the delay ends into the marks, for Inspect (display
// only). Our node's watch firing (our node gone, or with a child watch any
// change of the queue) or ctx ending stops the wait: run lists again, and
// the moments already counted stay counted.
func (a *attempt) sitOut(ctx context.Context, os []mark) error {
	d := a.d
	now := time.Now()
	if a.seen == nil {
		a.seen = make(map[string]time.Time)
	}
	until := now
	for _, o := range os {
		t, ok := a.seen[o.name]
		if !ok {
			t = now.Add(o.delay)
			a.seen[o.name] = t
			a.noteUntil(ctx, o, t)
		}
		until = maxTime(until, t)
	}
	a.step = stepList
	if wait := time.Until(until); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case ev := <-a.own:
			a.ownEvent(ev)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, o := range os {
		path := a.keyPath + "/" + o.name
		err := call0(ctx, nil, d.timeout(), func() error { return d.conn.Delete(path, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return a.retry(ctx, "delete "+o.name, err)
		}
	}
	return nil
}

// A mark's data is its entry's metadata (JSON, or nothing), as Inspect
// shows the entry once it has ended; once somebody counts its delay,
// preceded by a line "until=<Unix milliseconds>", when the delay ends.
const untilPrefix = "until="

// noteUntil writes into the mark o when its delay ends, t, for Inspect
// (display only), keeping the metadata it holds: a read, then a write at
// the version read. A mark gone meanwhile (another grantee sat it out) or
// written by somebody else (who counts too) is left as it is.
func (a *attempt) noteUntil(ctx context.Context, o mark, t time.Time) {
	d := a.d
	path := a.keyPath + "/" + o.name
	r, err := call(ctx, nil, d.timeout(), func() (getW, error) {
		data, stat, err := d.conn.Get(path)
		return getW{stat: stat, data: data}, err
	})
	if err != nil {
		return
	}
	if until, _ := parseMarkData(r.data); !until.IsZero() {
		return
	}
	_, _ = call(ctx, nil, d.timeout(), func() ([]zk.MultiResponse, error) {
		return d.conn.Multi(&zk.SetDataRequest{Path: path, Data: untilData(t, r.data), Version: r.stat.Version})
	})
}

// untilData is a mark's data saying that its delay ends at t.
func untilData(t time.Time, meta []byte) []byte {
	b := strconv.AppendInt([]byte(untilPrefix), t.UnixMilli(), 10)
	return append(append(b, '\n'), meta...)
}

// parseMarkData reverses untilData; until is zero when nobody counts the
// delay yet.
func parseMarkData(data []byte) (until time.Time, meta []byte) {
	rest, ok := strings.CutPrefix(string(data), untilPrefix)
	if !ok {
		return time.Time{}, data
	}
	line, _, _ := strings.Cut(rest, "\n")
	ms, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return time.Time{}, data
	}
	return time.UnixMilli(ms), data[len(untilPrefix)+len(line)+1:]
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// removeMarked releases a grant with a mark: the release's multi, with the
// mark's delete in the same transaction, so that a released entry never
// leaves an orphan, and an entry that did not release always does. A
// forfeited grant's node (see forfeit.go) goes without its mark: its lease
// ended at its deadline, not by a release, and its holder may not have
// noticed yet. With no write permission on the node (see remove), the
// setData is left out.
func (g *grant) removeMarked(ctx context.Context, version int32) error {
	d := g.d
	g.lifeMu.Lock()
	keepMark := g.forfeited
	g.lifeMu.Unlock()
	sent := time.Now()
	del := func(withSet bool) error {
		ops := []any{&zk.DeleteRequest{Path: g.path, Version: version}}
		if withSet {
			ops = []any{&zk.SetDataRequest{Path: g.path, Data: nil, Version: version}, &zk.DeleteRequest{Path: g.path, Version: -1}}
		}
		if !keepMark {
			ops = append(ops, &zk.DeleteRequest{Path: g.mark, Version: -1})
		}
		return call0(ctx, nil, g.validity, func() error {
			_, err := d.conn.Multi(ops...)
			return err
		})
	}
	err := del(true)
	if errors.Is(err, zk.ErrNoAuth) {
		sent = time.Now()
		err = del(false)
	}
	if err == nil {
		d.noteViaLeader(g.sid, sent)
	}
	return err
}

// delayInfo completes info, read from a listing of the key node at path
// (children) whose lock nodes are q, with the marks: each holder's
// lock-delay, and the orphans, as holders ahead of the nodes, with the
// time their delay ends (DelayedUntil: the latest; from now when nobody
// counts it yet). It returns the orphans' entries.
func (d *zkDriver) delayInfo(ctx context.Context, path string, ms []mark, q []lockNode, info *driver.LockInfo) ([]driver.Entry, []mark, error) {
	var (
		out []driver.Entry
		os  []mark
	)
	for _, m := range orphans(ms, q, "") {
		type node struct {
			data []byte
			stat *zk.Stat
		}
		r, err := call(ctx, nil, d.timeout(), func() (node, error) {
			data, stat, err := d.conn.Get(path + "/" + m.name)
			return node{data, stat}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // sat out meanwhile
		}
		if err != nil {
			return nil, nil, d.wrapErr("read "+m.name, err)
		}
		until, meta := parseMarkData(r.data)
		if until.IsZero() {
			until = time.Now().Add(m.delay) // nobody counts it yet
		}
		info.DelayedUntil = maxTime(info.DelayedUntil, until)
		out = append(out, driver.Entry{Token: uint64(r.stat.Czxid), Metadata: meta, Since: time.UnixMilli(r.stat.Ctime), TTL: -1, Mode: m.mode, LockDelay: m.delay})
		os = append(os, m)
	}
	return out, os, nil
}

// markOf returns the lock-delay the marks give owner's entry.
func markOf(ms []mark, owner string) (mark, bool) {
	for _, m := range ms {
		if m.owner == owner {
			return m, true
		}
	}
	return mark{}, false
}

// errDelayed is TryLock's error while a lock-delay keeps it from the key.
func errDelayed(os []mark) error {
	var longest time.Duration
	for _, o := range os {
		longest = max(longest, o.delay)
	}
	return fmt.Errorf("%w: a lock-delay of %v is in force (a holder's grant ended without a release)", driver.ErrLocked, longest)
}
