package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// scrapeInterval is how often Prometheus scrapes the instances: often, so
// that a run of a few minutes has enough samples for rates over a few
// seconds.
const scrapeInterval = time.Second

// errPrometheus marks a failure of the Prometheus server or of a query.
var errPrometheus = errors.New("prometheus")

// lookPrometheus finds the prometheus binary: $PROMETHEUS_BIN, or on PATH.
func lookPrometheus() (string, error) {
	if p := os.Getenv("PROMETHEUS_BIN"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		return "", fmt.Errorf("%w: not found on PATH (or in $PROMETHEUS_BIN); install it: apt-get install -y prometheus", errPrometheus)
	}
	return p, nil
}

// startRedis starts a redis-server on a free loopback port, keeping
// nothing on disk.
func startRedis() (addr string, stop func(), err error) {
	addr, stop, err = testserver.StartRedisForMain()
	if err != nil {
		return "", nil, fmt.Errorf("redis-server: %w", err)
	}
	return addr, stop, nil
}

// promServer is a Prometheus started by startPrometheus.
type promServer struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
	client http.Client
}

// promConfig scrapes each instance every second, naming it by its
// instance label rather than by its address, which changes from run to
// run.
const promConfig = `global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
  - job_name: dlock
    static_configs:
%[2]s`

// startPrometheus starts bin on a free loopback port, storing into a
// temporary directory, scraping targets (instance name to address) every
// second, and waits until it is ready.
func startPrometheus(ctx context.Context, bin string, targets map[string]string, log io.Writer) (*promServer, error) {
	dir, err := os.MkdirTemp("", "dlock-dashboard-prometheus-")
	if err != nil {
		return nil, err
	}
	var static strings.Builder
	for name, addr := range targets {
		fmt.Fprintf(&static, "      - targets: [%q]\n        labels: {instance: %q}\n", addr, name)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(promConfig, promDuration(scrapeInterval), static.String())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: start %s: %w", errPrometheus, bin, err)
	}
	p := &promServer{addr: addr, dir: dir, cmd: cmd, exited: make(chan struct{}), client: http.Client{Timeout: 30 * time.Second}}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	if err := p.waitReady(ctx, time.Minute); err != nil {
		out, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		p.stop()
		fmt.Fprintf(log, "%s", out)
		return nil, err
	}
	return p, nil
}

// waitReady polls /-/ready every 100ms until it answers 200, the server
// exits, or timeout passes.
func (p *promServer) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/-/ready", nil)
		if err != nil {
			return err
		}
		if resp, err := p.client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%w on %s exited before it was ready", errPrometheus, p.addr)
		case <-ctx.Done():
			return fmt.Errorf("%w on %s not ready after %v: %w", errPrometheus, p.addr, timeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitScraped waits until every instance has been scraped at t or later
// (polling every 200ms, for timeout at most), so that a range query that
// ends at t finds its last samples.
func (p *promServer) waitScraped(ctx context.Context, t time.Time, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		// The oldest of the instances' latest scrapes.
		v, err := p.query(ctx, `min(timestamp(up{job="dlock"}))`)
		if err == nil && len(v) == 1 && !v[0].value.Before(t) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for a scrape after %v: %w", errPrometheus, t.Format(time.TimeOnly), ctx.Err())
		case <-tick.C:
		}
	}
}

// instant is one series' value of an instant query, read as a time.
type instant struct{ value time.Time }

// query evaluates an instant query whose values are Unix times.
func (p *promServer) query(ctx context.Context, expr string) ([]instant, error) {
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	var out []instant
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: query %q: value %q: %w", errPrometheus, expr, s, err)
		}
		out = append(out, instant{time.Unix(0, int64(f*1e9))})
	}
	return out, nil
}

// series is one series of a range query: its labels and its points, NaN
// where the expression has no value (a quantile of no events).
type series struct {
	labels map[string]string
	points []point
}

type point struct {
	t time.Time
	v float64
}

// queryRange evaluates expr from start to end every step, as Grafana does
// for a panel.
func (p *promServer) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]series, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	params := url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1e3, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1e3, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	if err := p.get(ctx, "/api/v1/query_range", params, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "matrix" {
		return nil, fmt.Errorf("%w: query_range %q returned a %s, want a matrix", errPrometheus, expr, data.ResultType)
	}
	out := make([]series, 0, len(data.Result))
	for _, r := range data.Result {
		s := series{labels: r.Metric}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64) // "NaN" and "+Inf" parse
			if err != nil {
				return nil, fmt.Errorf("%w: query_range %q: value %q: %w", errPrometheus, expr, str, err)
			}
			s.points = append(s.points, point{time.UnixMilli(int64(ts * 1e3)), f})
		}
		out = append(out, s)
	}
	return out, nil
}

// get calls an API endpoint and decodes the data of its answer.
func (p *promServer) get(ctx context.Context, path string, params url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", errPrometheus, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%w: %s: HTTP %s: %w", errPrometheus, path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%w: %s %q: %s", errPrometheus, path, params.Get("query"), body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// stop kills the server and removes its directory.
func (p *promServer) stop() {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
	_ = os.RemoveAll(p.dir)
}
