package demo

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Verdict is what the demo measured. Every field is computed from the
// ledger's records and the workers' reports; none is assumed.
type Verdict struct {
	// Store is where the orders were closed: "ledger" (the demo's HTTP
	// ledger, fenced by httpfence), "sqlite" or "postgres" (a database,
	// fenced by sqlfence).
	Store   string `json:"store"`
	Fencing bool   `json:"fencing"` // the store checked tokens
	Orders  int    `json:"orders"`  // orders to close (--jobs)
	// OrdersClosed counts orders closed at least once.
	OrdersClosed int `json:"orders_closed"`
	// JobsStarted counts jobs begun (reads that returned an order),
	// including those of killed and frozen workers.
	JobsStarted int `json:"jobs_started"`
	// Overlaps are pairs of critical sections (one per token) whose spans,
	// from the first to the last request the ledger saw with the token,
	// intersect: two holders were at work at once.
	Overlaps []Overlap `json:"overlaps"`
	// StaleRejected and StaleAccepted count writes whose token was lower
	// than one the ledger had already seen.
	StaleRejected int `json:"stale_writes_rejected"`
	StaleAccepted int `json:"stale_writes_accepted"`
	// ClosedTwice lists orders closed more than once: the damage.
	ClosedTwice []int `json:"orders_closed_twice"`
	// KillToGrantMS is the time from the SIGKILL of a holder to the next
	// grant of the lock; nil if no kill happened or no grant followed.
	KillToGrantMS *float64 `json:"kill_to_next_grant_ms"`
	// FreezeToGrantMS is the same for the SIGSTOP.
	FreezeToGrantMS *float64 `json:"freeze_to_next_grant_ms"`
	// HandOffs counts orderly hand-offs (a holder unlocked and the next
	// waiter got the lock); their latency percentiles follow.
	HandOffs       int      `json:"hand_offs"`
	HandOffP50MS   *float64 `json:"hand_off_p50_ms"`
	HandOffP99MS   *float64 `json:"hand_off_p99_ms"`
	Faults         []Fault  `json:"faults"`
	TTLMS          float64  `json:"ttl_ms"`
	Safe           bool     `json:"safe"`
	Problems       []string `json:"problems"` // why it is not safe
	ElapsedSeconds float64  `json:"elapsed_seconds"`
}

// Section is the part of one lock holding that the ledger saw.
type Section struct {
	Worker string    `json:"worker"`
	Token  uint64    `json:"token"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
}

// Overlap is two sections that intersect in time.
type Overlap struct {
	A Section `json:"a"`
	B Section `json:"b"`
}

// Fault is one injected fault.
type Fault struct {
	Kind   string    `json:"kind"` // "SIGKILL", "SIGSTOP", "SIGCONT"
	Worker string    `json:"worker"`
	Job    int       `json:"job"`
	At     time.Time `json:"at"`
}

// grant is one acquisition of the lock, as reported by a worker.
type grant struct {
	Worker    string
	Token     uint64
	WaitFrom  time.Time // when the worker called Lock
	At        time.Time // when Lock returned
	ReleaseAt time.Time // when the worker began Unlock; zero if it never did
	Released  bool      // Unlock succeeded: an orderly hand-off follows
}

// computeVerdict derives the verdict from what was observed. store is
// Verdict.Store; refunds, if not nil, is the database's count of closes per
// order: it, not the records, decides which orders were closed, and how
// often.
func computeVerdict(store string, fencing bool, orders int, ttl time.Duration, records []Record, grants []grant, faults []Fault, refunds map[int]int) Verdict {
	v := Verdict{Store: store, Fencing: fencing, Orders: orders, TTLMS: ms(ttl), Faults: faults, Overlaps: []Overlap{}, ClosedTwice: []int{}, Problems: []string{}}

	closes := map[int]int{}
	spans := map[uint64]*Section{}
	for _, r := range records {
		if s, ok := spans[r.Token]; ok {
			s.From, s.To = minTime(s.From, r.At), maxTime(s.To, r.At)
		} else {
			spans[r.Token] = &Section{Worker: r.Worker, Token: r.Token, From: r.At, To: r.At}
		}
		switch {
		case r.Op == OpRead && r.Order != 0:
			v.JobsStarted++
		case r.Op == OpClose && r.Accepted:
			closes[r.Order]++
			if r.Stale() {
				v.StaleAccepted++
			}
		case r.Op == OpClose && r.Stale():
			v.StaleRejected++
		}
	}
	if refunds != nil {
		closes = refunds
	}
	for o := 1; o <= orders; o++ {
		if closes[o] > 0 {
			v.OrdersClosed++
		}
		if closes[o] > 1 {
			v.ClosedTwice = append(v.ClosedTwice, o)
		}
	}

	sections := make([]Section, 0, len(spans))
	for _, s := range spans {
		sections = append(sections, *s)
	}
	slices.SortFunc(sections, func(a, b Section) int { return a.From.Compare(b.From) })
	for i, a := range sections {
		for _, b := range sections[i+1:] {
			if b.From.Before(a.To) {
				v.Overlaps = append(v.Overlaps, Overlap{A: a, B: b})
			}
		}
	}

	slices.SortFunc(grants, func(a, b grant) int { return cmp.Compare(a.Token, b.Token) })
	var handOffs []float64
	for i := 1; i < len(grants); i++ {
		prev, next := grants[i-1], grants[i]
		// A hand-off needs a waiter: one that came later found the lock free.
		if prev.Released && !prev.ReleaseAt.IsZero() && !next.WaitFrom.After(prev.ReleaseAt) {
			handOffs = append(handOffs, ms(next.At.Sub(prev.ReleaseAt)))
		}
	}
	firstGrantAfter := func(t time.Time) *float64 {
		for _, g := range grants {
			if g.At.After(t) {
				d := ms(g.At.Sub(t))
				return &d
			}
		}
		return nil
	}
	for _, f := range faults {
		switch f.Kind {
		case "SIGKILL":
			v.KillToGrantMS = firstGrantAfter(f.At)
		case "SIGSTOP":
			v.FreezeToGrantMS = firstGrantAfter(f.At)
		}
	}
	v.HandOffs = len(handOffs)
	if len(handOffs) > 0 {
		slices.Sort(handOffs)
		p50, p99 := percentile(handOffs, 0.50), percentile(handOffs, 0.99)
		v.HandOffP50MS, v.HandOffP99MS = &p50, &p99
	}

	if v.StaleAccepted > 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("%s accepted %d write(s) from holders whose lease had already passed to someone else", v.where(), v.StaleAccepted))
	}
	if len(v.ClosedTwice) > 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("order(s) %v were closed twice", v.ClosedTwice))
	}
	if v.OrdersClosed < orders {
		v.Problems = append(v.Problems, fmt.Sprintf("only %d of %d orders were closed", v.OrdersClosed, orders))
	}
	v.Safe = len(v.Problems) == 0
	return v
}

// percentile returns the nearest-rank q-quantile of sorted.
func percentile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// WriteText prints the verdict for people.
func (v *Verdict) WriteText(w io.Writer) {
	p := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-31s %s\n", label, fmt.Sprintf(format, args...))
	}
	switch v.Store {
	case "sqlite":
		fmt.Fprintf(w, "\nverdict (SQLite, sqlfence fencing %s)\n", onOff(v.Fencing))
	case "postgres":
		fmt.Fprintf(w, "\nverdict (PostgreSQL, sqlfence fencing %s)\n", onOff(v.Fencing))
	default:
		fmt.Fprintf(w, "\nverdict (ledger fencing %s)\n", onOff(v.Fencing))
	}
	p("jobs done", "%d of %d orders closed (%d jobs started)", v.OrdersClosed, v.Orders, v.JobsStarted)
	var pairs []string
	for _, o := range v.Overlaps {
		pairs = append(pairs, fmt.Sprintf("%s (token %d) with %s (token %d)", o.A.Worker, o.A.Token, o.B.Worker, o.B.Token))
	}
	if len(pairs) == 0 {
		p("overlapping critical sections", "0 seen by the ledger")
	} else {
		p("overlapping critical sections", "%d seen by the ledger: %s", len(v.Overlaps), strings.Join(pairs, "; "))
	}
	accepted := fmt.Sprint(v.StaleAccepted)
	if v.StaleAccepted > 0 {
		accepted += " ACCEPTED"
	} else {
		accepted += " accepted"
	}
	p("stale writes", "%d rejected, %s", v.StaleRejected, accepted)
	p("orders closed twice", "%s", orNone(v.ClosedTwice))
	p("kill → next grant", "%s (TTL %s)", fmtMS(v.KillToGrantMS), fmtMS(&v.TTLMS))
	p("freeze → next grant", "%s", fmtMS(v.FreezeToGrantMS))
	if v.HandOffs > 0 {
		p("hand-off latency", "p50 %s, p99 %s (%d hand-offs)", fmtMS(v.HandOffP50MS), fmtMS(v.HandOffP99MS), v.HandOffs)
	} else {
		p("hand-off latency", "n/a (no orderly hand-off)")
	}
	fmt.Fprintln(w)
	switch {
	case v.Safe && len(v.Overlaps) > 0:
		fmt.Fprintln(w, "SAFE: the lock alone did not keep two holders apart (a frozen holder woke up after its")
		fmt.Fprintf(w, "lease had expired), but %s rejected its stale fencing token, so no order was\n", v.where())
		fmt.Fprintln(w, "closed twice.")
	case v.Safe:
		fmt.Fprintln(w, "SAFE: every order was closed exactly once.")
	default:
		fmt.Fprintf(w, "UNSAFE: %s.\n", strings.Join(v.Problems, "; "))
		if !v.Fencing {
			fmt.Fprintf(w, "%s did not check fencing tokens: a lock alone cannot stop a holder that was paused\n", capitalize(v.where()))
			fmt.Fprintln(w, "past its lease. Pass the lock's token with every write and reject old ones.")
		}
	}
}

// where names the store the verdict is about.
func (v *Verdict) where() string {
	if v.Store != "ledger" {
		return "the database"
	}
	return "the ledger"
}

func capitalize(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "OFF"
}

func orNone(orders []int) string {
	if len(orders) == 0 {
		return "none"
	}
	s := make([]string, len(orders))
	for i, o := range orders {
		s[i] = fmt.Sprintf("#%d", o)
	}
	return strings.Join(s, ", ")
}

func fmtMS(v *float64) string {
	if v == nil {
		return "n/a"
	}
	d := time.Duration(*v * float64(time.Millisecond))
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(10 * time.Microsecond).String()
	}
}
