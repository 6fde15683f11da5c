// Command dashboard renders docs/grafana/dlock.json over real data: it starts
// a redis-server and a Prometheus that scrapes every second, runs a scripted
// workload of dlock clients reporting through dlockprom for a few minutes,
// then evaluates every panel's queries with Prometheus's query_range and
// draws the panels in the dashboard's grid into docs/dashboard.png. The
// picture shows what the dashboard's PromQL returns, drawn with gonum/plot
// rather than by Grafana (which Debian does not package).
//
//	cd bench && go run ./dashboard            # about 3 minutes
//	cd bench && go run ./dashboard -duration 5m -out /tmp/dash.png
//
// Needs redis-server and prometheus (apt-get install -y redis-server
// prometheus), or their paths in $REDIS_SERVER_BIN and $PROMETHEUS_BIN.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	f := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	f.SetOutput(stderr)
	duration := f.Duration("duration", 3*time.Minute, "how long the workload runs (1m to 30m)")
	dash := f.String("dashboard", filepath.Join("..", "docs", "grafana", "dlock.json"), "the Grafana dashboard to render")
	out := f.String("out", filepath.Join("..", "docs", "dashboard.png"), "the PNG to write")
	child := f.String("child", "", "internal: run the second instance's workload against this Redis address")
	if err := f.Parse(args); err != nil {
		return 2
	}
	if *child != "" {
		if err := runChild(ctx, *child, os.Stdout); err != nil {
			fmt.Fprintln(stderr, "dashboard child:", err)
			return 1
		}
		return 0
	}
	if *duration < time.Minute || *duration > 30*time.Minute {
		fmt.Fprintf(stderr, "dashboard: -duration %v: want 1m to 30m\n", *duration)
		return 2
	}
	if err := render(ctx, *dash, *out, *duration, stderr); err != nil {
		fmt.Fprintln(stderr, "dashboard:", err)
		return 1
	}
	return 0
}

// render runs the workload under Prometheus and draws the dashboard over
// what it scraped.
func render(ctx context.Context, dashPath, out string, duration time.Duration, log io.Writer) error {
	d, err := loadDashboard(dashPath)
	if err != nil {
		return err
	}
	promBin, err := lookPrometheus()
	if err != nil {
		return err
	}
	redisAddr, stopRedis, err := startRedis()
	if err != nil {
		return err
	}
	defer stopRedis()

	fleet, err := startFleet(ctx, redisAddr, log)
	if err != nil {
		return err
	}
	defer fleet.stop()

	prom, err := startPrometheus(ctx, promBin, fleet.targets(), log)
	if err != nil {
		return err
	}
	defer prom.stop()

	fmt.Fprintf(log, "dashboard: Redis on %s, Prometheus on %s, instances %v; the workload runs %v\n", redisAddr, prom.addr, fleet.targets(), duration)
	start := time.Now()
	if err := fleet.run(ctx, duration); err != nil {
		return err
	}
	end := time.Now()
	// The last scrape after the workload's end must be in before the
	// queries: they run to end.
	if err := prom.waitScraped(ctx, end, 15*time.Second); err != nil {
		return err
	}
	res, err := evaluate(ctx, prom, d, start, end)
	if err != nil {
		return err
	}
	if err := drawDashboard(d, res, start, end, out); err != nil {
		return err
	}
	fmt.Fprintf(log, "dashboard: wrote %s\n", out)
	return nil
}
