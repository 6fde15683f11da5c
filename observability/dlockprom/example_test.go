package dlockprom_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
	"github.com/dlockdev/dlock/observability/dlockprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func Example() {
	ctx := context.Background()
	m := dlockprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	// Served as usual for Prometheus to scrape.
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// With dlock.Open(ctx, url, dlock.WithHooks(m.Hooks())) for a real server.
	client, _, err := memdlock.New(nil, dlock.WithHooks(m.Hooks()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Lock(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	printSeries(reg, "dlock_leases_active")
	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	printSeries(reg, "dlock_leases_active")
	printSeries(reg, "dlock_hold_duration_seconds")
	// Output:
	// dlock_leases_active{backend="mem",kind="lock"} 1
	// dlock_leases_active{backend="mem",kind="lock"} 0
	// dlock_hold_duration_seconds{backend="mem",kind="lock",reason="released"} 1 observation
}

// printSeries prints the series of the metric name as reg exposes them:
// a gauge's value, a histogram's count.
func printSeries(reg prometheus.Gatherer, name string) {
	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			series := name + "{" + strings.Join(labels, ",") + "}"
			if h := s.GetHistogram(); h != nil {
				fmt.Println(series, h.GetSampleCount(), "observation")
			} else {
				fmt.Println(series, s.GetGauge().GetValue())
			}
		}
	}
}
