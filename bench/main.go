// Command bench runs dlock and its peer libraries through the same workloads
// on the same servers, in one run, and writes docs/benchmarks.md and
// docs/benchmarks.png.
//
//	cd bench && ./run.sh            # everything, 9–13 minutes on 2 cores
//	cd bench && go run . -quick     # a smoke test: short windows, small scale
//	cd bench && ./run.sh -only modes  # only the semaphore and RWMutex
//	cd bench && ./run.sh -only election  # only leader election
//	cd bench && ./run.sh -only memory    # only server memory per lock, and what released keys leave
//
// It starts its own redis-server, ZooKeeper (the Debian package's jars) and
// an embedded etcd (in a child process) on free loopback ports, and stops
// them at the end. Every loop is bounded in count and in time.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type config struct {
	out      string
	quick    bool
	window   time.Duration
	warmup   time.Duration
	only     *regexp.Regexp
	sections map[string]bool
	ns       []int
	queueN   int
	from     string
	// modes are the workloads of the modes section.
	modes []modeWorkload
	// modesHold is how long each holder of the modes section holds its
	// lease (-modes-hold; default modeHold).
	modesHold time.Duration
	// partial: -only chose sections (modes workloads, election, memory)
	// rather than libraries, or -sections chose sections; like -quick, the
	// report is then written only where -out says.
	partial bool
}

// results is everything one run measured; it is also written as JSON.
type results struct {
	Start, End  time.Time
	Command     string
	Machine     machineInfo
	Versions    map[string]string
	Libraries   []libInfo
	RTT         map[string]rttResult
	Uncontended []uncontendedResult
	Contended   []contendedResult
	ClientCost  []clientCostResult
	Queue       []queueResult
	Keys        []keysResult
	Memory      []memoryResult
	Modes       []modeResult
	Election    []electionResult
	Notes       []string
}

type libInfo struct {
	Name, Backend, Module, Version, Waiting, Missing string
	IsDlock                                          bool
}

func main() {
	if len(os.Args) == 5 && os.Args[1] == "serve-etcd" {
		if err := serveEtcd(os.Args[2], os.Args[3], os.Args[4]); err != nil {
			fmt.Fprintln(os.Stderr, "serve-etcd:", err)
			os.Exit(1)
		}
		return
	}
	testing.Init() // for testing.Benchmark (client cost)
	var cfg config
	var only, sections string
	flag.StringVar(&cfg.out, "out", defaultOut, "directory for benchmarks.md and benchmarks.png")
	flag.BoolVar(&cfg.quick, "quick", false, "smoke test: short windows and small scale tests (does not write the report unless -out is given)")
	flag.DurationVar(&cfg.window, "window", 2*time.Second, "measuring window of each contended run")
	flag.DurationVar(&cfg.warmup, "warmup", 300*time.Millisecond, "warm-up before each contended window")
	flag.StringVar(&only, "only", "", "run only the libraries whose name matches this regexp; or, with \"modes\", \"semaphore\", \"rwmutex\", \"election\" or \"memory\" (comma-separated), only those workloads of the modes section (with the lock as the reference) or the election section, and the round-trip floor; or the memory section")
	flag.DurationVar(&cfg.modesHold, "modes-hold", modeHold, "how long each holder of the modes section holds its lease (the work a permit guards)")
	flag.IntVar(&cfg.queueN, "queue-waiters", 0, "override the number of waiters of the queue test (0: per library, see queueSize)")
	flag.StringVar(&cfg.from, "from", "", "do not measure: write the report and chart from this results.json of an earlier run")
	flag.StringVar(&sections, "sections", "rtt,uncontended,contended,modes,election,cost,queue,keys,memory", "sections to run; when given, the report is written only where -out says")
	flag.Parse()
	cfg.modes = modeWorkloads
	cfg.partial = flagGiven("sections")
	if sel, ok := onlySections(only); ok {
		cfg.partial = true
		if sel.modes != nil {
			cfg.modes = sel.modes
		}
		if !flagGiven("sections") {
			sections = strings.Join(sel.sections(), ",")
		}
	} else if only != "" {
		cfg.only = regexp.MustCompile(only)
	}
	cfg.sections = map[string]bool{}
	for _, s := range strings.Split(sections, ",") {
		cfg.sections[strings.TrimSpace(s)] = true
	}
	cfg.ns = []int{2, 8, 32, 128}
	if cfg.quick {
		if !flagGiven("window") {
			cfg.window = 500 * time.Millisecond
		}
		if !flagGiven("warmup") {
			cfg.warmup = 100 * time.Millisecond
		}
	}
	log.SetFlags(log.Ltime)
	if err := run(cfg); err != nil {
		log.Fatal(err)
	}
}

func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func run(cfg config) error {
	if cfg.from != "" {
		b, err := os.ReadFile(cfg.from)
		if err != nil {
			return err
		}
		res := &results{}
		if err := json.Unmarshal(b, res); err != nil {
			return err
		}
		return writeOutputs(res, cfg.out, false)
	}
	res := &results{Start: time.Now(), Command: "cd bench && " + strings.Join(append([]string{"go run ."}, os.Args[1:]...), " ")}
	if c := os.Getenv("BENCH_COMMAND"); c != "" {
		res.Command = c
	}
	res.Machine = machine()
	log.Printf("machine: %d CPUs, %s, load %s", res.Machine.NumCPU, res.Machine.CPU, res.Machine.LoadBefore)

	// Servers, started in parallel.
	s := &servers{env: &env{}}
	var wg sync.WaitGroup
	var rerr, zerr, eerr error
	wg.Go(func() { s.redis, rerr = startRedis() })
	wg.Go(func() { s.zk, zerr = startZooKeeper() })
	wg.Go(func() { s.etcd, eerr = startEtcd() })
	wg.Wait()
	defer s.stop()
	for _, err := range []error{rerr, zerr, eerr} {
		if err != nil {
			return err
		}
	}
	s.env.redisAddr, s.env.zkAddr, s.env.etcdAddr = s.redis.addr, s.zk.addr, s.etcd.addr
	log.Printf("servers: redis %s, zookeeper %s, etcd %s", s.redis.addr, s.zk.addr, s.etcd.addr)
	res.Versions = versions(s)

	var libs []*library
	for _, l := range libraries() {
		if cfg.only != nil && !cfg.only.MatchString(l.Name) {
			continue
		}
		libs = append(libs, l)
		res.Libraries = append(res.Libraries, libInfo{Name: l.Name, Backend: l.Backend, Module: l.Module,
			Version: res.Versions[l.Module], Waiting: l.Waiting, Missing: l.Missing, IsDlock: l.IsDlock})
	}
	avail := func(l *library) bool { return l.Missing == "" }

	if cfg.sections["rtt"] {
		n := 3000
		if cfg.quick {
			n = 500
		}
		log.Printf("round-trip floor")
		rtt, err := runRTT(s, n)
		if err != nil {
			return err
		}
		res.RTT = rtt
		for _, b := range []string{"redis", "redis-notify", "zookeeper", "zookeeper-notify", "etcd", "etcd-notify"} {
			log.Printf("  %s %s: p50 %v p99 %v %s", rtt[b].Backend, rtt[b].Op, rtt[b].P50, rtt[b].P99, rtt[b].Err)
		}
	}
	if cfg.sections["uncontended"] {
		n, limit := 2000, 3*time.Second
		if cfg.quick {
			n, limit = 300, time.Second
		}
		for _, l := range libs {
			if !avail(l) {
				continue
			}
			r := runUncontended(s, l, n, limit)
			log.Printf("uncontended %-18s n=%d p50 %v p99 %v req/cycle %.2f %s", l.Name, r.N, r.P50, r.P99, r.RequestsPerGrnt, r.Err)
			res.Uncontended = append(res.Uncontended, r)
		}
	}
	if cfg.sections["contended"] {
		for _, l := range libs {
			if !avail(l) {
				continue
			}
			for _, n := range cfg.ns {
				for _, think := range []bool{false, true} {
					// Fresh clients and a fresh key for every run: a run
					// that ends can leave a lock behind (a request cut by
					// the end of its context), and must not slow the next.
					t0 := time.Now()
					cs, err := newContenders(s, l, n, fmt.Sprintf("contended-%d-%v", n, think))
					if err != nil {
						log.Printf("contended %s n=%d: %v", l.Name, n, err)
						res.Contended = append(res.Contended, contendedResult{Lib: l.Name, N: n, Think: think, FirstErr: err.Error()})
						continue
					}
					setup := time.Since(t0)
					r := runContended(s, l, cs, think, cfg.warmup, cfg.window)
					r.Setup = setup
					log.Printf("contended %-18s n=%-3d think=%-5v grants/s %7.0f handoff p50 %8v p99 %8v barged %4.0f%% fair %d/%d overlaps %d req/grant %.2f errs %d stuck %d %s",
						l.Name, n, think, r.GrantsPerS, r.HandoffP50, r.HandoffP99, 100*float64(r.SelfRetakes)/float64(max(r.Grants, 1)),
						r.MinGrants, r.MaxGrants, r.Overlaps, r.Delta.Requests/float64(max(r.Grants, 1)), r.Errors, r.Stuck, r.FirstErr)
					res.Contended = append(res.Contended, r)
					closeAll(cs)
				}
			}
		}
	}
	if cfg.sections["modes"] {
		res.Modes = runModesSection(s, libs, cfg)
	}
	if cfg.sections["election"] {
		res.Election = runElectionSection(s, libs, cfg)
	}
	if cfg.sections["cost"] {
		bt := "1s"
		if cfg.quick {
			bt = "200ms"
		}
		_ = flag.Set("test.benchtime", bt)
		for _, l := range libs {
			if !avail(l) {
				continue
			}
			r := runClientCost(s, l)
			log.Printf("client cost %-18s %s", l.Name, r)
			res.ClientCost = append(res.ClientCost, r)
		}
	}
	if cfg.sections["queue"] {
		for _, l := range libs {
			if !avail(l) {
				continue
			}
			waiters, note := queueSize(l, cfg.quick)
			if cfg.queueN > 0 {
				waiters, note = cfg.queueN, ""
			}
			r := runQueue(s, l, waiters, 16, 40*time.Second)
			if note != "" {
				r.Note = strings.TrimPrefix(r.Note+"; "+note, "; ")
			}
			log.Printf("queue %-18s waiters %d enqueue %v drain %v drained %d mem/waiter %.0f B overlaps %d %s %s", l.Name, r.Waiters, r.Enqueue, r.Drain, r.Drained, r.MemPerWait, r.Overlaps, r.Note, r.Err)
			res.Queue = append(res.Queue, r)
		}
	}
	if cfg.sections["keys"] {
		for _, l := range libs {
			if !avail(l) {
				continue
			}
			keys, note := keysSize(l, cfg.quick)
			if note != "" && !slices.Contains(res.Notes, note) {
				res.Notes = append(res.Notes, note)
			}
			r := runKeys(s, l, keys, 4, 64, 90*time.Second)
			log.Printf("keys %-18s keys %d held %d acquire %v release %v mem/key %.0f B (%s) %s", l.Name, r.Keys, r.Held, r.Acquire, r.Release, r.MemPerKey, r.MemWhat, r.Err)
			res.Keys = append(res.Keys, r)
		}
	}
	if cfg.sections["memory"] {
		res.Memory = runMemorySection(libs, cfg.quick)
	}
	res.End = time.Now()
	res.Machine.LoadAfter = loadavg()
	log.Printf("done in %v; load %s", res.End.Sub(res.Start).Round(time.Second), res.Machine.LoadAfter)

	if (cfg.quick || cfg.partial) && !flagGiven("out") {
		return nil
	}
	return writeOutputs(res, cfg.out, true)
}

// defaultOut is where the committed report goes.
const defaultOut = "../docs"

// writeOutputs writes the chart and the report into dir, and the raw
// results to results.json: in the current directory (bench/ under run.sh)
// for the committed report in ../docs, beside the report for any other
// -out, so that trial runs leave the committed results alone.
func writeOutputs(res *results, dir string, saveJSON bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if saveJSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		path := "results.json"
		if filepath.Clean(dir) != filepath.Clean(defaultOut) {
			path = filepath.Join(dir, "results.json")
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	if err := writeChart(res, filepath.Join(dir, "benchmarks.png")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(report(res)), 0o644); err != nil {
		return err
	}
	log.Printf("wrote %s and %s", filepath.Join(dir, "benchmarks.md"), filepath.Join(dir, "benchmarks.png"))
	return nil
}

func closeAll(cs []contender) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(c.Close)
	}
	wg.Wait()
}

// queueSize is the number of waiters each library queues on one key: 10,000
// where the library gets through that well within the time limit, fewer
// where it would not (and the reason, for the report).
func queueSize(l *library, quick bool) (int, string) {
	n, note := 10000, ""
	switch l.Name {
	case "redsync", "bsm/redislock":
		n, note = 500, "scaled down to 500: every waiter polls every 1 ms; 1,000 pollers already took 13–15 s to drain on this machine"
	case "rueidislock":
		n, note = 1000, "scaled down to 1,000: 10,000 had not drained after 90 s (each release wakes every Locker, and waiters that miss a wake-up wait on)"
	case "go-zookeeper Lock":
		n, note = 2000, "scaled down to 2,000: every waiter lists all children of the key node when it queues and again when its predecessor goes, so the work grows with the square of the queue; with 10,000 (development run, same servers) it drained 4,558 within the 40 s limit"
	case "etcd Mutex":
		n, note = 2000, "scaled down to 2,000: a session (lease and keep-alive) per waiter, and each hand-off takes a few ms"
	}
	if quick {
		n = max(n/20, 10)
	}
	return n, note
}

// keysSize is the number of distinct keys each library holds at once.
func keysSize(l *library, quick bool) (int, string) {
	n, note := 100000, ""
	if l.Backend != "redis" {
		n, note = 20000, "20,000 keys instead of 100,000 on ZooKeeper and etcd, to keep the run under 10 minutes (100,000 took 17–35 s per library to acquire, plus the release); memory per lock does not depend on the count"
	}
	if quick {
		n = 2000
	}
	return n, note
}
