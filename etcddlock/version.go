package etcddlock

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/coreos/go-semver/semver"
	"github.com/dlockdev/dlock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The first release of each line whose leader ensures it still leads before
// it revokes expired leases (docs/etcd.md, "etcd versions", lists the
// changes). Earlier lines never got the fix.
var (
	fixedIn34 = semver.New("3.4.31")
	fixedIn35 = semver.New("3.5.13")
	fixedIn36 = semver.New("3.6.0")
)

// revokesLiveLeases reports whether an etcd server of version v may revoke
// a lease that its holder is renewing: a leader that pauses and resumes
// revokes the leases that expired by its own clock, after a new leader
// renewed them. Pre-releases of 3.6.0 count as affected: etcd's main branch
// called itself 3.6.0-alpha.0 long before it had the fix.
func revokesLiveLeases(v *semver.Version) bool {
	switch {
	case v.Major == 3 && v.Minor == 4:
		return v.LessThan(*fixedIn34)
	case v.Major == 3 && v.Minor == 5:
		return v.LessThan(*fixedIn35)
	}
	return v.LessThan(*fixedIn36)
}

// memberStatus is what one status request said, or how it failed.
type memberStatus struct {
	url  string
	resp *clientv3.StatusResponse
	err  error
}

// checkVersions returns an error satisfying errors.Is(err, ErrUnsafeServer)
// when a member of cli's cluster runs an etcd version that revokes live
// leases (or one it cannot compare), and one satisfying errors.Is with
// dlock.ErrUnavailable when a started member answers at none of the
// addresses tried. It asks every member listed now, learners too (they can
// be promoted): members added later are checked by the next Open or New.
//
// A member's version comes from a status request, sent both to cli's own
// endpoints and to the client URLs each member advertises, all at once: the
// answer names the member that gave it, so a member whose advertised URLs
// cannot be reached from here (NAT, container networks) is still checked
// when one of cli's endpoints reaches it. The requests stop as soon as every
// member has answered, and after DefaultDialTimeout (or when ctx ends) at
// the latest. A member that has not started yet (no client URLs)
// has never led, and is left to the next check.
func (d *etcdDriver) checkVersions(ctx context.Context, cli *clientv3.Client) error {
	// A member that cannot be reached is only found out by a timeout: the
	// client waits for a connection until its context ends.
	ctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
	defer cancel()
	// MemberList: the members of the cluster, with their client URLs.
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return d.wrapErr("list the members to check their versions", err)
	}
	var started []uint64
	urls := slices.Clone(cli.Endpoints())
	for _, m := range ml.Members {
		if len(m.ClientURLs) > 0 {
			started = append(started, m.ID)
		}
		for _, u := range m.ClientURLs {
			if !slices.Contains(urls, u) {
				urls = append(urls, u)
			}
		}
	}

	pctx, cancelProbes := context.WithCancel(ctx)
	defer cancelProbes()
	mt := clientv3.NewMaintenance(cli)
	results := make(chan memberStatus, len(urls))
	for _, u := range urls {
		go func() {
			// Status: the answering member's id and server version.
			resp, err := mt.Status(pctx, u)
			results <- memberStatus{url: u, resp: resp, err: err}
		}()
	}
	answered := map[uint64]memberStatus{}
	failed := map[string]error{}
	for range urls {
		r := <-results
		if r.err != nil {
			failed[r.url] = r.err
			continue
		}
		if _, ok := answered[r.resp.Header.MemberId]; !ok {
			answered[r.resp.Header.MemberId] = r
		}
		if !slices.ContainsFunc(started, func(id uint64) bool { _, ok := answered[id]; return !ok }) {
			cancelProbes() // every member answered: the other requests are not needed
		}
	}

	var unsafe, silent []string
	for _, m := range ml.Members {
		name := memberName(m.Name, m.ID)
		r, ok := answered[m.ID]
		switch {
		case ok:
			v, err := semver.NewVersion(strings.TrimPrefix(r.resp.Version, "v"))
			if err != nil {
				unsafe = append(unsafe, fmt.Sprintf("member %s at %s reports version %q, which etcddlock cannot compare", name, r.url, r.resp.Version))
			} else if revokesLiveLeases(v) {
				unsafe = append(unsafe, fmt.Sprintf("member %s at %s runs etcd %s", name, r.url, r.resp.Version))
			}
		case len(m.ClientURLs) > 0:
			var errs []string
			for _, u := range m.ClientURLs {
				errs = append(errs, fmt.Sprintf("%s: %v", u, failed[u]))
			}
			silent = append(silent, fmt.Sprintf("member %s (%s)", name, strings.Join(errs, "; ")))
		}
	}
	if len(unsafe) > 0 {
		return fmt.Errorf("%w: etcd at %s: %s: before 3.4.31, 3.5.13 and 3.6.0, an etcd leader that pauses and resumes revokes leases that expired by its own clock although a new leader renewed them (etcd-io/etcd#15247), "+
			"so a held lock can be granted to a second owner while its holder's lease is valid; upgrade, or set AllowUnsafeVersion in etcddlock.Options (URL: allow_unsafe_version=true) to accept that risk",
			ErrUnsafeServer, d.addr, strings.Join(unsafe, ", "))
	}
	if len(silent) > 0 {
		return fmt.Errorf("%w: etcd at %s: no answer to a status request from %s, whose etcd version is therefore unknown; "+
			"give the client an endpoint that reaches it, or set AllowUnsafeVersion in etcddlock.Options (URL: allow_unsafe_version=true) to skip the version check",
			driver.ErrUnavailable, d.addr, strings.Join(silent, ", "))
	}
	return nil
}

// memberName names a member by its name and id (names may be empty or
// repeated).
func memberName(name string, id uint64) string {
	if name == "" {
		return fmt.Sprintf("%x", id)
	}
	return fmt.Sprintf("%s (%x)", name, id)
}
