package faultinject_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
)

// churn is a set of holder processes that each loop acquire → fenced write →
// hold → release on one key, while the test injects faults.
type churn struct {
	r        *rig
	key      string
	holders  []*proc
	proxies  [][]*faultproxy.Proxy // per holder, one per server
	replies  []<-chan faultinject.Event
	checked  *faultinject.Resource
	unchkd   *faultinject.Resource
	start    int64
	duration time.Duration
}

// startChurn starts n holders (through proxies when viaProxy) looping for
// duration; hold bounds the random time each keeps the key.
func startChurn(t *testing.T, r *rig, n int, duration, hold time.Duration, weak, viaProxy bool) *churn {
	t.Helper()
	return startChurnOn(t, r, r.key("churn"), n, duration, hold, weak, viaProxy)
}

// startChurnOn is startChurn on a given key.
func startChurnOn(t *testing.T, r *rig, key string, n int, duration, hold time.Duration, weak, viaProxy bool) *churn {
	t.Helper()
	c := &churn{r: r, key: key, duration: duration}
	c.checked, c.unchkd = r.resources()
	r.targets = []string{c.checked.Name, c.unchkd.Name}
	for i := range n {
		var via []*faultproxy.Proxy
		if viaProxy {
			for _, a := range r.addrs {
				via = append(via, r.proxyTo(a))
			}
		}
		c.proxies = append(c.proxies, via)
		c.holders = append(c.holders, r.holder(fmt.Sprintf("H%d", i), weak, via...))
	}
	c.start = faultinject.Mono()
	for _, h := range c.holders {
		c.replies = append(c.replies, h.send(faultinject.Command{Op: "loop", Key: c.key, Duration: duration,
			Hold: hold, Writes: 1, Timeout: 3*r.ttl + 10*time.Second}))
	}
	return c
}

// until reports whether the loops are still meant to run at t.
func (c *churn) running() bool {
	return time.Duration(faultinject.Mono()-c.start) < c.duration
}

// wait waits for every loop to end and returns the leases they reported.
func (c *churn) wait(t *testing.T) []faultinject.LeaseRecord {
	t.Helper()
	var all []faultinject.LeaseRecord
	for i, h := range c.holders {
		ev := h.await(c.replies[i], c.duration+3*c.r.ttl+2*time.Minute, "its loop")
		if len(ev.Errors) > 0 {
			t.Logf("holder %s: %d acquisitions, %d failed attempts (first: %s)", h.name, ev.Acquired, len(ev.Errors), ev.Errors[0])
		}
		all = append(all, h.leases()...)
	}
	return all
}

// analysis is what the history of a churn shows.
type analysis struct {
	leases      int
	overlaps    int      // pairs of leases held at once: double grants
	regressions int      // leases whose token is not above an earlier, finished one
	stale       int      // writes the unchecked resource accepted below its highest token
	staleOK     int      // writes the checked resource accepted below its highest token (must be 0)
	examples    []string // of overlaps
	linear      porcupine.CheckResult
}

func analyse(t *testing.T, leases []faultinject.LeaseRecord, checked, unchecked *faultinject.Resource, linearize bool) analysis {
	t.Helper()
	a := analysis{leases: len(leases)}
	sort.Slice(leases, func(i, j int) bool { return leases[i].LockRet < leases[j].LockRet })
	for i := range leases {
		for j := i + 1; j < len(leases); j++ {
			x, y := &leases[i], &leases[j]
			// Each lease was relied on from its Lock's return to its End;
			// one whose grant arrived after its deadline (a reply held
			// up by the network) was never relied on at all.
			if max(x.LockRet, y.LockRet) >= min(x.End(), y.End()) {
				continue
			}
			a.overlaps++
			if len(a.examples) < 3 {
				a.examples = append(a.examples, fmt.Sprintf("%s (token %d) held until %v after %s (token %d) got the key",
					x.Holder, x.Token, time.Duration(x.End()-y.LockRet).Round(time.Millisecond), y.Holder, y.Token))
			}
		}
	}
	// Tokens: above every token of a lease that ended before this one began.
	var done []faultinject.LeaseRecord
	for _, l := range leases {
		if l.End() <= l.LockRet {
			continue // dead on arrival: its grant preceded others' in fact
		}
		for _, d := range done {
			if d.End() <= l.LockRet && l.Token <= d.Token {
				a.regressions++
				break
			}
		}
		done = append(done, l)
	}
	for _, res := range []*faultinject.Resource{checked, unchecked} {
		var max uint64
		for _, w := range res.Log() {
			if w.Accepted && w.Token < max {
				if res == checked {
					a.staleOK++
				} else {
					a.stale++
				}
			}
			if w.Accepted && w.Token > max {
				max = w.Token
			}
		}
	}
	if linearize {
		a.linear = checkLinearizable(t, leases, checked)
	}
	return a
}

// The fenced-mutex model: one key, and the resource its holders write to.
// An acquire is legal only if the key is free and its token is above every
// earlier one; a release frees the key it holds; a write is accepted if and
// only if its token is not below the highest accepted so far.
type mutexState struct {
	holder uint64 // token of the holder; 0 when free
	last   uint64 // highest token granted
	max    uint64 // highest token the resource accepted
}

type mutexInput struct {
	op     string // acquire, release, write
	client string
	token  uint64
}

type mutexOutput struct {
	token    uint64 // acquire
	accepted bool   // write
}

var fencedMutex = porcupine.Model{
	Init: func() any { return mutexState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(mutexState), input.(mutexInput), output.(mutexOutput)
		switch in.op {
		case "acquire":
			if s.holder != 0 || out.token <= s.last {
				return false, s
			}
			s.holder, s.last = out.token, out.token
		case "release":
			if s.holder != in.token {
				return false, s
			}
			s.holder = 0
		case "write":
			if out.accepted != (in.token >= s.max) {
				return false, s
			}
			if out.accepted {
				s.max = in.token
			}
		}
		return true, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(mutexInput), output.(mutexOutput)
		switch in.op {
		case "acquire":
			return fmt.Sprintf("%s acquire → %d", in.client, out.token)
		case "write":
			return fmt.Sprintf("%s write(%d) → %v", in.client, in.token, out.accepted)
		}
		return fmt.Sprintf("%s release(%d)", in.client, in.token)
	},
}

// history turns lease records into porcupine operations. A lease's release
// is linearized somewhere between the moment its holder stopped relying on
// it (its deadline, the loss it saw, or its Unlock call) and the return of
// an Unlock that confirmed it — or the end of the history, when the server
// may have freed the key by itself later. Writes are taken from the holders'
// own records: called before, answered after the resource decided.
func history(leases []faultinject.LeaseRecord) []porcupine.Operation {
	var end int64
	for _, l := range leases {
		end = max(end, l.UnlockRet, l.LockRet)
		for _, w := range l.Writes {
			end = max(end, w.Ret)
		}
	}
	end++
	ids := map[string]int{}
	var ops []porcupine.Operation
	for _, l := range leases {
		id, ok := ids[l.Holder]
		if !ok {
			id = len(ids)
			ids[l.Holder] = id
		}
		ops = append(ops, porcupine.Operation{ClientId: id, Input: mutexInput{"acquire", l.Holder, 0},
			Call: l.LockCall, Output: mutexOutput{token: l.Token}, Return: l.LockRet})
		for _, w := range l.Writes {
			if w.Err != "" {
				continue
			}
			ops = append(ops, porcupine.Operation{ClientId: id, Input: mutexInput{"write", l.Holder, l.Token},
				Call: w.Call, Output: mutexOutput{accepted: acceptedByChecked(w)}, Return: w.Ret})
		}
		ret := end
		if l.UnlockKind == "" {
			ret = l.UnlockRet
		}
		// End is after LockCall: the deadline counts from a request sent
		// after the call. It may be before LockRet, when the grant's reply
		// arrived late: the acquire then linearizes early in its interval.
		ops = append(ops, porcupine.Operation{ClientId: id, Input: mutexInput{"release", l.Holder, l.Token},
			Call: l.End(), Output: mutexOutput{}, Return: max(ret, l.End())})
	}
	return ops
}

// acceptedByChecked returns the checked resource's decision on a write.
func acceptedByChecked(w faultinject.WriteResult) bool {
	for name, ok := range w.Accepted {
		if len(name) > 8 && name[:8] == "checked-" {
			return ok
		}
	}
	return false
}

func checkLinearizable(t *testing.T, leases []faultinject.LeaseRecord, checked *faultinject.Resource) porcupine.CheckResult {
	t.Helper()
	ops := history(leases)
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(fencedMutex, ops, 2*time.Minute)
	t.Logf("porcupine: %d operations, %v in %v", len(ops), res, time.Since(start).Round(time.Millisecond))
	if res == porcupine.Illegal {
		for _, part := range info.PartialLinearizationsOperations() {
			for _, lin := range part {
				if len(lin) > 0 {
					t.Logf("longest legal prefix ends with: %s", describeTail(lin))
					break
				}
			}
		}
	}
	return res
}

func describeTail(ops []porcupine.Operation) string {
	if len(ops) > 4 {
		ops = ops[len(ops)-4:]
	}
	s := ""
	for _, op := range ops {
		s += fencedMutex.DescribeOperation(op.Input, op.Output) + "; "
	}
	return s
}

// withoutLateGrants drops the leases whose grant was delivered after a
// lease with a higher token had already been returned: grants older than
// what the holder was told, the signature of the known Redis bug (see
// knownBugs). It returns the rest and how many it dropped.
func withoutLateGrants(leases []faultinject.LeaseRecord) ([]faultinject.LeaseRecord, int) {
	sorted := append([]faultinject.LeaseRecord(nil), leases...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].LockRet < sorted[j].LockRet })
	var out []faultinject.LeaseRecord
	var top uint64
	dropped := 0
	for _, l := range sorted {
		if l.Token < top && l.End() > l.LockRet {
			dropped++
			continue
		}
		top = max(top, l.Token)
		out = append(out, l)
	}
	return out, dropped
}
