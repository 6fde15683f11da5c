package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/observability/dlockprom"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// dashboardPath is the dashboard the renderer draws and docs/observability.md
// tells users to import.
var dashboardPath = filepath.Join("..", "..", "docs", "grafana", "dlock.json")

// family is a metric dlockprom exports: its type and its labels.
type family struct {
	typ    dto.MetricType
	labels []string
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"instance", "job"}

// descName reads the name out of a Desc, which has no accessor for it.
var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// exported returns the metrics a dlockprom.Metrics describes, with the
// types and labels of the series it reports once each hook has been called:
// the names come from Describe, the rest from Gather.
func exported(t *testing.T) map[string]family {
	t.Helper()
	m := dlockprom.New()
	descs := make(chan *prometheus.Desc, 64)
	m.Describe(descs)
	close(descs)
	var names []string
	for d := range descs {
		match := descName.FindStringSubmatch(d.String())
		if match == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names = append(names, match[1])
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	h := m.Hooks()
	ctx := context.Background()
	for _, kind := range []dlock.Kind{dlock.KindLock, dlock.KindElection} {
		ctx := h.AcquireStart(ctx, dlock.AcquireStartInfo{Backend: "redis", Key: "k", Kind: kind, Wait: true})
		ctx = h.AcquireDone(ctx, dlock.AcquireDoneInfo{Backend: "redis", Key: "k", Kind: kind, Outcome: dlock.OutcomeAcquired, Token: 1})
		h.Renewed(ctx, dlock.RenewedInfo{Backend: "redis", Key: "k", Kind: kind, Token: 1})
		h.LeaseEnded(ctx, dlock.LeaseEndedInfo{Backend: "redis", Key: "k", Kind: kind, Token: 1, Reason: dlock.EndDropped})
		h.Unprotected(ctx, dlock.UnprotectedInfo{Backend: "redis", Key: "k", Kind: kind, Token: 1, Reason: dlock.EndDropped})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]family{}
	for _, mf := range mfs {
		f := family{typ: mf.GetType()}
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			f.labels = append(f.labels, lp.GetName())
		}
		fams[mf.GetName()] = f
	}
	out := map[string]family{}
	for _, n := range names {
		f, ok := fams[n]
		if !ok {
			t.Fatalf("dlockprom describes %s, but calling each hook once reported no series of it: make exported call the hook that does", n)
		}
		out[n] = f
	}
	return out
}

// errUnknown marks a query that names a metric or label dlockprom does not
// export.
var errUnknown = errors.New("not exported by dlockprom")

// checkQuery checks that every metric a query selects is one of fams (a
// histogram's by its _bucket, _count or _sum series), and that every label
// it matches, groups by or names in legend is one the metrics have.
func checkQuery(expr, legendFormat string, fams map[string]family) error {
	refs, err := parseRefs(expr)
	if err != nil {
		return err
	}
	if len(refs.selectors) == 0 {
		return fmt.Errorf("selects no metric")
	}
	known := slices.Clone(targetLabels)
	for _, s := range refs.selectors {
		f, ok := fams[s.metric]
		base, suffix := s.metric, ""
		for _, sfx := range []string{"_bucket", "_count", "_sum"} {
			if b, found := strings.CutSuffix(s.metric, sfx); found && !ok {
				base, suffix = b, sfx
				f, ok = fams[b]
			}
		}
		switch {
		case !ok:
			return fmt.Errorf("%w: metric %s", errUnknown, s.metric)
		case f.typ == dto.MetricType_HISTOGRAM && suffix == "":
			return fmt.Errorf("%w: %s is a histogram: select its _bucket, _count or _sum", errUnknown, base)
		case f.typ != dto.MetricType_HISTOGRAM && suffix != "":
			return fmt.Errorf("%w: metric %s (%s is a %s, not a histogram)", errUnknown, s.metric, base, f.typ)
		}
		labels := append(slices.Clone(f.labels), targetLabels...)
		if suffix == "_bucket" {
			labels = append(labels, "le")
		}
		for _, l := range s.labels {
			if !slices.Contains(labels, l) {
				return fmt.Errorf("%w: label %s of %s", errUnknown, l, s.metric)
			}
		}
		known = append(known, labels...)
	}
	for _, l := range refs.grouping {
		if !slices.Contains(known, l) {
			return fmt.Errorf("%w: label %s in by/without", errUnknown, l)
		}
	}
	for _, m := range legendVar.FindAllStringSubmatch(legendFormat, -1) {
		if !slices.Contains(known, m[1]) {
			return fmt.Errorf("%w: label %s in the legend %q", errUnknown, m[1], legendFormat)
		}
	}
	return nil
}

// labelValues reads a template variable's label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// The dashboard's queries select only metrics and labels that dlockprom
// exports, so a renamed metric or label fails here rather than leaving a
// panel empty; and every variable in them is one the renderer expands.
func TestDashboard_queriesUseExportedMetrics(t *testing.T) {
	d, err := loadDashboard(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	fams := exported(t)
	in := newInterpolation(d, 3*time.Minute, points, scrapeInterval)
	targets := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			targets++
			if err := checkQuery(tg.Expr, tg.LegendFormat, fams); err != nil {
				t.Errorf("panel %q, query %s: %v\n\t%s", p.Title, tg.RefID, err, tg.Expr)
			}
			if _, err := in.expand(tg.Expr); err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
		}
	}
	if targets == 0 {
		t.Fatal("the dashboard has no queries")
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		if err := checkQuery(m[1], "{{"+m[2]+"}}", fams); err != nil {
			t.Errorf("variable %s: %v\n\t%s", v.Name, err, v.Definition)
		}
	}
}

// Every metric dlockprom exports has a panel: a new metric needs one.
func TestDashboard_showsEveryMetric(t *testing.T) {
	d, err := loadDashboard(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			refs, err := parseRefs(tg.Expr)
			if err != nil {
				t.Fatalf("panel %q: %v", p.Title, err)
			}
			for _, s := range refs.selectors {
				for _, sfx := range []string{"", "_bucket", "_count", "_sum"} {
					shown[strings.TrimSuffix(s.metric, sfx)] = true
				}
			}
		}
	}
	for name := range exported(t) {
		if !shown[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}

// checkQuery catches the mistakes a dashboard edit makes: a metric, a
// suffix or a label that dlockprom does not export.
func TestCheckQuery_rejectsWhatIsNotExported(t *testing.T) {
	fams := exported(t)
	for _, tc := range []struct {
		expr, legend string
		ok           bool
	}{
		{`sum by (outcome) (rate(dlock_acquire_duration_seconds_count{backend=~"$backend"}[$__rate_interval]))`, "{{outcome}}", true},
		{`histogram_quantile(0.99, sum by (le) (rate(dlock_renew_late_seconds_bucket[5m])))`, "", true},
		{`max by (name, instance) (leader_election_master_status)`, "{{name}} {{instance}}", true},
		{`sum(rate(dlock_acquire_seconds_count[5m]))`, "", false},                    // no such metric
		{`sum(rate(dlock_acquire_duration_seconds[5m]))`, "", false},                 // a histogram's bare name
		{`sum(rate(dlock_lease_lost_total_bucket[5m]))`, "", false},                  // a counter has no buckets
		{`sum(rate(dlock_lease_lost_total{outcome="x"}[5m]))`, "", false},            // not its label
		{`sum by (key) (dlock_leases_active)`, "", false},                            // no key label by default
		{`sum by (reason) (rate(dlock_lease_lost_total[5m]))`, "{{outcome}}", false}, // legend's label
		{`sum by (le) (rate(dlock_hold_duration_seconds_count[5m]))`, "", false},     // le only on _bucket
		{`sum without (instance) (rate(dlock_unprotected_total{reason!="x"}[1m]))`, "", true},
	} {
		err := checkQuery(tc.expr, tc.legend, fams)
		if tc.ok && err != nil {
			t.Errorf("checkQuery(%s) = %v, want nil", tc.expr, err)
		}
		if !tc.ok && !errors.Is(err, errUnknown) {
			t.Errorf("checkQuery(%s) = %v, want errUnknown", tc.expr, err)
		}
	}
}

// expand substitutes Grafana's intervals by its rule and the template
// variables at their All value, and refuses a variable it does not know.
func TestInterpolation_expand(t *testing.T) {
	d := &dashboard{}
	d.Templating.List = []variable{{Name: "datasource", Type: "datasource"}, {Name: "backend", Type: "query", AllValue: ".*"}}
	in := newInterpolation(d, 10*time.Minute, 600, time.Second)
	got, err := in.expand(`rate(x{backend=~"$backend", kind=~"${backend}"}[$__rate_interval]) offset $__interval`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `rate(x{backend=~".*", kind=~".*"}[4s]) offset 1s`; got != want {
		t.Errorf("expand = %s, want %s", got, want)
	}
	// A longer range: the step grows past the scrape interval.
	in = newInterpolation(d, 60*time.Minute, 600, time.Second)
	if got, _ := in.expand("[$__rate_interval]"); got != "[7s]" {
		t.Errorf("expand over an hour = %s, want [7s] (6s step + 1s scrape)", got)
	}
	if _, err := in.expand(`x{kind=~"$kind"}`); err == nil {
		t.Error("expand of an unknown variable succeeded")
	}
}
