package main

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rogpeppe/go-internal/testscript"
)

// metricsAt finds the address that `dlock … --metrics-addr` prints.
var metricsAt = regexp.MustCompile(`(?m)^dlock: metrics at (http://\S+/metrics)$`)

func cmdScrape(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: scrape NAME METRIC [VALUE [LABEL=VALUE...]]")
	}
	var url string
	if !waitUntil(waitBound, func() bool {
		m := metricsAt.FindStringSubmatch(ts.ReadFile(args[0] + ".stderr"))
		if m != nil {
			url = m[1]
		}
		return m != nil
	}) {
		ts.Fatalf("%s printed no metrics address within %v", args[0], waitBound)
	}
	fams := scrapeURL(ts, url)
	fam, ok := fams[args[1]]
	if !ok {
		ts.Fatalf("%s serves no %s", url, args[1])
	}
	if len(args) == 2 {
		return
	}
	want, err := strconv.ParseFloat(args[2], 64)
	ts.Check(err)
	labels := args[3:]
	slices.Sort(labels)
	var have []string
	for _, s := range fam.GetMetric() {
		got, value := seriesOf(s)
		if slices.Equal(got, labels) {
			if value != want {
				ts.Fatalf("%s%v = %v, want %v", args[1], labels, value, want)
			}
			return
		}
		have = append(have, fmt.Sprint(got))
	}
	ts.Fatalf("%s has no series %v; it has %s", args[1], labels, strings.Join(have, " "))
}

// scrapeURL gets and parses a text exposition, as Prometheus would.
func scrapeURL(ts *testscript.TestScript, url string) map[string]*dto.MetricFamily {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	ts.Check(err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ts.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	ts.Check(err)
	return fams
}

// seriesOf returns a series' labels as sorted NAME=VALUE and its value: a
// counter's or gauge's, a histogram's count.
func seriesOf(s *dto.Metric) (labels []string, value float64) {
	for _, l := range s.GetLabel() {
		labels = append(labels, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(labels)
	switch {
	case s.GetHistogram() != nil:
		value = float64(s.GetHistogram().GetSampleCount())
	case s.GetCounter() != nil:
		value = s.GetCounter().GetValue()
	default:
		value = s.GetGauge().GetValue()
	}
	return labels, value
}
