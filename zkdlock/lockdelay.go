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
// every node. The first Client to see an orphan (a waiter, a TryLock,
// Inspect, the ended holder's own Client, or the revoker) writes into it
// when its delay ends: the delay after that moment, on its clock; every
// later one takes that time, capped at the delay after its own first
// sight (see noteUntil). An entry an orphan keeps from being granted sits
// the delay out, then deletes the mark and lists again (see sitOut); and
// each Client that saw it deletes it then too, from a janitor, if it is
// still there and still an orphan (see reapMark): so a mark goes once its
// delay is over while any Client that saw it lives, though nobody locks
// the key again, and a grantee that dies while sitting out does not make
// the next one count the delay again. A mark no living Client saw is
// found by the sweep of the root's index of marks (see delayindex.go),
// whose entry goes in the same multi as the mark wherever it is deleted
// (deleteMark, removeMarked). Keys nobody uses with a delay have
// no marks, and cost nothing more: the name check in a listing's parse,
// no request.
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
	err := a.d.deleteMark(ctx, a.keyPath, markName(a.req.Owner, a.req.LockDelay, a.req.Mode), -1)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// sitOut waits out the lock-delay of the orphans os, which keep our node
// from being granted, then deletes their marks, so that the listing run
// makes next grants us. Each delay ends at the first of: the time written
// in its mark by whoever counted it first (noteUntil), and the delay after
// this attempt first saw it. Our node's watch firing (our node gone, or
// with a child watch any change of the queue) or ctx ending stops the
// wait: run lists again, and the moments already counted stay counted.
// TryLock (no wait) fails with errDelayed while a delay is in force.
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
			if noted, ok := d.noteUntil(ctx, a.keyPath, o, t); ok && noted.Before(t) {
				t = noted
			}
			a.seen[o.name] = t
		}
		until = maxTime(until, t)
	}
	a.step = stepList
	if wait := time.Until(until); wait > 0 {
		if !a.req.Wait {
			return a.leave(ctx, errDelayed(os))
		}
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
		err := d.deleteMark(ctx, a.keyPath, o.name, -1)
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

// noteUntil returns when the delay of the orphan o of the key node at
// path ends: the time written in its mark by whoever counted it first, or
// else t, which it writes there, keeping the metadata the mark holds (a
// read, then a write at the version read). Either way a janitor of this
// Client deletes the mark then, if the Client lives (reapMark): the mark
// goes once its delay is over although nobody locks the key again. ok is
// false when the mark is gone (its delay was sat out), or could not be
// read.
func (d *zkDriver) noteUntil(ctx context.Context, path string, o mark, t time.Time) (until time.Time, ok bool) {
	mpath := path + "/" + o.name
	r, err := call(ctx, nil, d.timeout(), func() (getW, error) {
		data, stat, err := d.conn.Get(mpath)
		return getW{stat: stat, data: data}, err
	})
	if err != nil {
		return time.Time{}, false
	}
	until, _ = parseMarkData(r.data)
	if until.IsZero() {
		until = t
		// Not written: by somebody else meanwhile (who counts too: the
		// janitor reads what they wrote), or undone (its owner queued
		// anew: the janitor sees its node).
		d.markUntil(ctx, path, o, r, t)
	}
	d.reapMark(path, o, until)
	return until, true
}

// reapMark starts a janitor that deletes the orphan o of the key node at
// path once the delay written in it is over by this Client's clock, unless
// one runs already or the Client is closed. It reads the mark again then
// (the time in it is the one to keep), and lists the key node: a mark
// whose owner has a node again (an attempt that queued anew after its
// session ended) is not an orphan any more.
func (d *zkDriver) reapMark(path string, o mark, until time.Time) {
	mpath := path + "/" + o.name
	if _, busy := d.reaping.LoadOrStore(mpath, true); busy {
		return
	}
	if !d.goJanitor(func(ctx context.Context) {
		defer d.reaping.Delete(mpath)
		d.reap(ctx, path, o, until)
	}) {
		d.reaping.Delete(mpath)
	}
}

// noted is a mark and when its delay ends.
type noted struct {
	mark  mark
	until time.Time
}

// reapTries bounds a janitor's reads of a mark whose time it finds not
// yet come (another Client's clock behind ours), and its retries of
// failed requests.
const reapTries = 8

// reap is reapMark's janitor.
func (d *zkDriver) reap(ctx context.Context, path string, o mark, until time.Time) {
	mpath := path + "/" + o.name
	for i := 0; i < reapTries; i++ {
		if wait := time.Until(until); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		r, err := call(ctx, nil, d.timeout(), func() (getW, error) {
			data, stat, err := d.conn.Get(mpath)
			return getW{stat: stat, data: data}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return // sat out and deleted
		}
		if err != nil {
			if backoff(ctx, i, d.timeout()/2) != nil {
				return
			}
			continue
		}
		if u, _ := parseMarkData(r.data); u.After(until) {
			until = u
			continue
		}
		children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
			children, _, err := d.conn.Children(path)
			return children, err
		})
		if err == nil && ownerIn(queue(children), o.owner) {
			return // queued anew: its mark is its entry's again
		}
		if err == nil {
			// Delete it at the version read: a mark written since is
			// not the one we timed.
			err = d.deleteMark(ctx, path, o.name, r.stat.Version)
		}
		if err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
			return
		}
		if backoff(ctx, i, d.timeout()/2) != nil {
			return
		}
	}
}

// endMark is run by a janitor when the grant g learns that its lease ended
// without its release (its node deleted, its session expired, or the node
// given up: see forfeit.go): unless its node is still there, it counts the
// delay of its own mark from now, like a grantee that sees it, so that the
// mark goes once the delay is over though nobody locks the key again.
func (g *grant) endMark(ctx context.Context) {
	if g.mark == "" {
		return
	}
	d := g.d
	path, name := g.mark[:strings.LastIndexByte(g.mark, '/')], g.mark[strings.LastIndexByte(g.mark, '/')+1:]
	m, ok := parseMark(name)
	if !ok {
		return
	}
	exists, err := call(ctx, nil, d.timeout(), func() (bool, error) {
		ok, _, err := d.conn.Exists(g.path)
		return ok, err
	})
	if err != nil || exists {
		return // still there: not ended yet, or unknown
	}
	d.noteUntil(ctx, path, m, time.Now().Add(m.delay))
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
// mark's delete and its index entry's in the same transaction, so that a
// released entry never leaves an orphan, and an entry that did not release
// always does. A forfeited grant's node (see forfeit.go) goes without its
// mark: its lease ended at its deadline, not by a release, and its holder
// may not have noticed yet. With no write permission on the node (see
// remove), the setData is left out; with no index entry (see
// indexMissing), its delete.
func (g *grant) removeMarked(ctx context.Context, version int32) error {
	d := g.d
	g.lifeMu.Lock()
	keepMark := g.forfeited
	g.lifeMu.Unlock()
	sent := time.Now()
	withIndex := !keepMark
	del := func(withSet bool) error {
		ops := []any{&zk.DeleteRequest{Path: g.path, Version: version}}
		if withSet {
			ops = []any{&zk.SetDataRequest{Path: g.path, Data: nil, Version: version}, &zk.DeleteRequest{Path: g.path, Version: -1}}
		}
		if !keepMark {
			ops = append(ops, &zk.DeleteRequest{Path: g.mark, Version: -1})
		}
		if withIndex {
			i := strings.LastIndexByte(g.mark, '/')
			ops = append(ops, &zk.DeleteRequest{Path: d.entryPath(g.mark[:i], g.mark[i+1:]), Version: -1})
		}
		rs, err := call(ctx, nil, g.validity, func() ([]zk.MultiResponse, error) {
			return d.conn.Multi(ops...)
		})
		if withIndex && indexMissing(rs, err) {
			withIndex = false
			sent = time.Now()
			_, err = call(ctx, nil, g.validity, func() ([]zk.MultiResponse, error) {
				return d.conn.Multi(ops[:len(ops)-1]...)
			})
		}
		return err
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
// time their delay ends (DelayedUntil: the latest). An orphan nobody
// counts yet starts counting now: its mark gets that time (noteUntil), so
// that it goes once the delay is over. An orphan whose time has passed is
// deleted (at the version read) and not shown. It returns the orphans'
// entries.
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
		switch {
		case until.IsZero():
			// Nobody counts it yet: from now.
			if until, _ = d.noteUntil(ctx, path, m, time.Now().Add(m.delay)); until.IsZero() {
				continue // gone meanwhile
			}
		case !until.After(time.Now()):
			// Its delay is over: a leftover nobody deleted yet.
			// Best effort: a mark left is a delay shown too long.
			_ = d.deleteMark(ctx, path, m.name, r.stat.Version)
			continue
		default:
			d.reapMark(path, m, until)
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

// reclaimMark makes this attempt's mark, made before its node was made
// anew (the node went with its session, or a create's reply was lost), its
// entry's again. While no node of ours was in the queue, a Client may have
// taken the mark for an orphan's: written when its delay ends (markUntil),
// or deleted it once that time passed. Either, left as it is, would give a
// later end of this entry a shorter delay, or none. Our node is in the
// queue now, so no Client takes the mark for an orphan's from here on
// (markUntil looks again after it writes): strip the time, or make the mark
// again, with its index entry.
func (a *attempt) reclaimMark(ctx context.Context) error {
	d := a.d
	mpath := a.markPath()
	var err error
	for range reapTries {
		var r getW
		r, err = call(ctx, nil, d.timeout(), func() (getW, error) {
			data, stat, err := d.conn.Get(mpath)
			return getW{stat: stat, data: data}, err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode):
			entry := d.entryPath(a.keyPath, mpath[len(a.keyPath)+1:])
			var rs []zk.MultiResponse
			rs, err = call(ctx, nil, d.timeout(), func() ([]zk.MultiResponse, error) {
				return d.conn.Multi(
					&zk.CreateRequest{Path: mpath, Data: a.req.Metadata, Acl: d.acl, Flags: 0},
					&zk.CreateRequest{Path: entry, Acl: d.acl, Flags: 0},
				)
			})
			switch {
			case indexMissing(rs, err):
				err = d.ensurePath(ctx, d.indexPath())
			case len(rs) == 2 && rs[0].Error == nil && errors.Is(rs[1].Error, zk.ErrNodeExists):
				// An entry an older dlock left when it deleted the mark.
				err = call0(ctx, nil, d.timeout(), func() error {
					_, err := d.conn.Create(mpath, a.req.Metadata, 0, d.acl)
					return err
				})
			}
			if err == nil {
				return nil
			}
		case err == nil:
			until, meta := parseMarkData(r.data)
			if until.IsZero() {
				return nil
			}
			_, err = call(ctx, nil, d.timeout(), func() ([]zk.MultiResponse, error) {
				return d.conn.Multi(&zk.SetDataRequest{Path: mpath, Data: meta, Version: r.stat.Version})
			})
			if err == nil {
				return nil
			}
		}
		if !errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrBadVersion) && !errors.Is(err, zk.ErrNoNode) {
			if err := backoff(ctx, 1, d.timeout()/10); err != nil {
				return err
			}
		}
	}
	return err
}

// markUntil writes into the orphan o of the key node at path, read as r,
// that its delay ends at t, at the version read; written reports whether
// that write took. Then it lists the key node again: an owner whose node
// was made anew meanwhile may have read its mark before this write
// (reclaimMark), and its mark must not keep a time counted while its
// entry was alive, so the write is undone. Written and undone in that
// order, the orphan's owner or this Client sees the other's node or write:
// both go through the leader, which orders them. What is left: an entry
// that ends between the two listings gets its delay counted from this
// write, a few round trips early at most.
func (d *zkDriver) markUntil(ctx context.Context, path string, o mark, r getW, t time.Time) (written bool) {
	mpath := path + "/" + o.name
	rs, err := call(ctx, nil, d.timeout(), func() ([]zk.MultiResponse, error) {
		return d.conn.Multi(&zk.SetDataRequest{Path: mpath, Data: untilData(t, r.data), Version: r.stat.Version})
	})
	if err != nil || len(rs) != 1 || rs[0].Stat == nil {
		return false
	}
	children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		children, _, err := d.conn.Children(path)
		return children, err
	})
	if err == nil && ownerIn(queue(children), o.owner) {
		_, _ = call(ctx, nil, d.timeout(), func() ([]zk.MultiResponse, error) {
			return d.conn.Multi(&zk.SetDataRequest{Path: mpath, Data: r.data, Version: rs[0].Stat.Version})
		})
		return false
	}
	return true
}
