package zkdlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// The lock-delay index. A mark whose holder's process died, and whose key
// nobody looks at again, would stay for ever: nothing on the server deletes
// a persistent node, and no Client knows of it. So every mark has an entry
// in an index node of the root, made in the same multi as the mark (and
// never without it), and deleted in the same multi as the mark by whoever
// deletes it:
//
//	<root>/%lock-delays                               persistent, one per root
//	<root>/%lock-delays/<escaped key>@<mark's name>   persistent, no data
//
// Every Client of the root sweeps the index now and then
// (Options.LockDelaySweep, jittered): a listing, then at most sweepPage
// entries from where its last sweep stopped, so it comes round to every
// entry within len(index)/sweepPage sweeps, and a Client's sweep never
// grows with the number of Clients. For each entry it lists the key node: a mark whose
// owner has a node is in use; one that is gone takes its entry with it; an
// orphan nobody counts yet gets its "until=" (the Client whose write wins
// deletes it then, from a janitor: one Client, not every sweeper); an
// orphan whose time has passed is deleted, with its entry. A mark of an
// older dlock has no entry: it goes as it always did, once a Client looks
// at its key; an older dlock that deletes a mark leaves its entry, which a
// sweep deletes.

// indexName is the index node's name under the root: a name no key escapes
// to ('%' before no hex digits), so List and older dlock's skip it.
const indexName = "%lock-delays"

// sweepPage bounds the entries one sweep looks at: each costs a listing of
// its key node, and an orphan a read and a write more.
const sweepPage = 3

// indexPath is the index node of the root.
func (d *zkDriver) indexPath() string { return d.root + "/" + indexName }

// entryPath is the path of the index entry of the mark named name of the
// key node at keyPath.
func (d *zkDriver) entryPath(keyPath, name string) string {
	return d.indexPath() + "/" + keyPath[len(d.root)+1:] + "@" + name
}

// parseEntry reverses entryPath's last element: the key node's name and
// the mark. The mark's name has no '@'; an escaped key may.
func parseEntry(name string) (keyName string, m mark, ok bool) {
	i := strings.LastIndexByte(name, '@')
	if i <= 0 {
		return "", mark{}, false
	}
	if m, ok = parseMark(name[i+1:]); !ok {
		return "", mark{}, false
	}
	if _, ok := unescapeKey(name[:i]); !ok {
		return "", mark{}, false
	}
	return name[:i], m, true
}

// indexMissing reports whether a multi whose last op deletes an index entry
// failed only for that entry's want: a mark of an older dlock, which has
// none, or an index node an operator deleted.
func indexMissing(rs []zk.MultiResponse, err error) bool {
	if !errors.Is(err, zk.ErrNoNode) || len(rs) == 0 || !errors.Is(rs[len(rs)-1].Error, zk.ErrNoNode) {
		return false
	}
	for _, r := range rs[:len(rs)-1] {
		if r.Error != nil {
			return false
		}
	}
	return true
}

// deleteMark deletes the mark named name of the key node at keyPath, at
// version (-1: any), and its index entry, in one multi; a mark without an
// entry alone. ErrNoNode: the mark is gone.
func (d *zkDriver) deleteMark(ctx context.Context, keyPath, name string, version int32) error {
	mpath := keyPath + "/" + name
	rs, err := call(ctx, nil, d.timeout(), func() ([]zk.MultiResponse, error) {
		return d.conn.Multi(
			&zk.DeleteRequest{Path: mpath, Version: version},
			&zk.DeleteRequest{Path: d.entryPath(keyPath, name), Version: -1},
		)
	})
	if indexMissing(rs, err) {
		err = call0(ctx, nil, d.timeout(), func() error { return d.conn.Delete(mpath, version) })
	}
	return err
}

// startSweep starts the Client's sweeper of the index, which Close stops
// before it waits for the janitors.
func (d *zkDriver) startSweep() {
	ctx, cancel := context.WithCancel(d.ctx)
	d.mu.Lock()
	d.stopSweep = cancel
	d.mu.Unlock()
	if !d.goJanitor(func(context.Context) {
		defer cancel()
		var after string // the last entry looked at
		for {
			// From half to one and a half intervals: Clients opened
			// together do not sweep together.
			t := time.NewTimer(d.sweepEvery/2 + rand.N(d.sweepEvery))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			after = d.sweep(ctx, after)
		}
	}) {
		cancel()
	}
}

// sweep lists the index and looks at up to sweepPage entries, from the
// first after after (a random one the first time), round to the start;
// it returns the last one it looked at.
func (d *zkDriver) sweep(ctx context.Context, after string) string {
	names, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		names, _, err := d.conn.Children(d.indexPath())
		return names, err
	})
	if err != nil || len(names) == 0 {
		return after // no index: nobody used a lock-delay under this root
	}
	slices.Sort(names)
	start := rand.N(len(names))
	if after != "" {
		start, _ = slices.BinarySearch(names, after+"\x00")
	}
	for i := range min(sweepPage, len(names)) {
		after = names[(start+i)%len(names)]
		d.sweepEntry(ctx, after)
	}
	return after
}

// sweepEntry looks at the index entry name: see the comment at the top.
func (d *zkDriver) sweepEntry(ctx context.Context, name string) {
	keyName, m, ok := parseEntry(name)
	if !ok {
		return // not dlock's
	}
	keyPath := d.root + "/" + keyName
	epath := d.indexPath() + "/" + name
	dropEntry := func() {
		_ = call0(ctx, nil, d.timeout(), func() error { return d.conn.Delete(epath, -1) })
	}
	// The key node's children: the mark, and whether its owner has a node.
	children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		children, _, err := d.conn.Children(keyPath)
		return children, err
	})
	switch {
	case errors.Is(err, zk.ErrNoNode) || err == nil && !slices.Contains(children, m.name):
		dropEntry() // the mark went without its entry
		return
	case err != nil, ownerIn(queue(children), m.owner):
		return // unknown, or in use
	}
	// An orphan: read when its delay ends.
	r, err := call(ctx, nil, d.timeout(), func() (getW, error) {
		data, stat, err := d.conn.Get(keyPath + "/" + m.name)
		return getW{stat: stat, data: data}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		dropEntry() // deleted meanwhile, by an older dlock if the entry is still there
		return
	}
	if err != nil {
		return
	}
	until, _ := parseMarkData(r.data)
	switch {
	case until.IsZero():
		// Nobody counts it: from now. Only the Client whose write wins
		// deletes it then; the others' sweeps come back to it later.
		until = time.Now().Add(m.delay)
		if d.markUntil(ctx, keyPath, m, r, until) {
			d.reapMark(keyPath, m, until)
		}
	case !until.After(time.Now()):
		// Over, and its counter's janitor did not delete it (its
		// Client is gone): at the version read, as reap does.
		_ = d.deleteMark(ctx, keyPath, m.name, r.stat.Version)
	}
}
