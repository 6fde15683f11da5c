package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// dashboard is the part of a Grafana dashboard's JSON model that the
// renderer and the test read.
type dashboard struct {
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

// variable is a template variable: $datasource, or a label's values.
type variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
	AllValue   string `json:"allValue"`
}

// panel is a dashboard panel drawn as a time series.
type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit     string `json:"unit"`
			Decimals *int   `json:"decimals"`
			Custom   struct {
				ScaleDistribution struct {
					Type string `json:"type"`
				} `json:"scaleDistribution"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []target `json:"targets"`
}

// logScale reports whether the panel's y axis is logarithmic.
func (p *panel) logScale() bool { return p.FieldConfig.Defaults.Custom.ScaleDistribution.Type == "log" }

// target is one PromQL query of a panel.
type target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// gridColumns is the width of Grafana's grid.
const gridColumns = 24

// loadDashboard reads a dashboard's JSON model and checks what the renderer
// needs of it: time series panels inside the grid, each with a query.
func loadDashboard(path string) (*dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("%s: no panels", path)
	}
	for _, p := range d.Panels {
		g := p.GridPos
		switch {
		case p.Type != "timeseries":
			return nil, fmt.Errorf("%s: panel %q is a %s; the renderer draws time series only", path, p.Title, p.Type)
		case g.X < 0 || g.W <= 0 || g.X+g.W > gridColumns || g.Y < 0 || g.H <= 0:
			return nil, fmt.Errorf("%s: panel %q: gridPos %+v is outside the %d-column grid", path, p.Title, g, gridColumns)
		case len(p.Targets) == 0:
			return nil, fmt.Errorf("%s: panel %q has no queries", path, p.Title)
		}
	}
	return &d, nil
}

// interpolation is what Grafana substitutes for the variables of a query
// over a time range drawn with a given step.
type interpolation struct {
	step, scrape time.Duration
	vars         map[string]string // the template variables, at their All value
}

// newInterpolation returns Grafana's substitutions for a range of length
// rng drawn in points points, on a data source whose scrape interval is
// scrape: $__interval is the range over the points, no less than the
// scrape interval; $__rate_interval is the larger of $__interval plus the
// scrape interval and four scrape intervals (Grafana's rule, so that a
// rate always has two samples or more).
func newInterpolation(d *dashboard, rng time.Duration, points int, scrape time.Duration) interpolation {
	step := max(rng/time.Duration(points), scrape).Round(time.Second)
	in := interpolation{step: step, scrape: scrape, vars: map[string]string{}}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			in.vars[v.Name] = v.AllValue
		}
	}
	return in
}

// rateInterval is Grafana's $__rate_interval.
func (in interpolation) rateInterval() time.Duration { return max(in.step+in.scrape, 4*in.scrape) }

// expand substitutes Grafana's variables in a query: the built-in
// intervals, and each template variable at its All value (every backend,
// every kind).
func (in interpolation) expand(expr string) (string, error) {
	pairs := []string{
		"$__rate_interval", promDuration(in.rateInterval()),
		"$__interval", promDuration(in.step),
	}
	for name, all := range in.vars {
		pairs = append(pairs, "${"+name+"}", all, "$"+name, all)
	}
	out := strings.NewReplacer(pairs...).Replace(expr)
	if i := strings.IndexByte(out, '$'); i >= 0 {
		return "", fmt.Errorf("query %q: unknown variable at %q", expr, out[i:])
	}
	return out, nil
}

// promDuration writes d as a PromQL duration in whole seconds.
func promDuration(d time.Duration) string {
	return fmt.Sprintf("%ds", int64(math.Ceil(d.Seconds())))
}
