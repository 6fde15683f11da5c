// Command bench runs dlock and its peer libraries through the same workloads
// on the same servers, in one run, and writes docs/benchmarks.md and
// docs/benchmarks.png.
//
//	cd bench && ./run.sh            # everything, durable servers (see run.sh for the time)
//	cd bench && ./run.sh -variant nofsync  # the same on servers that do not fsync
//	cd bench && go run . -quick     # a smoke test: short windows, small scale
//	cd bench && ./run.sh -only modes  # only the semaphore and RWMutex
//	cd bench && ./run.sh -only election  # only leader election
//	cd bench && ./run.sh -only memory    # only server memory per lock, and what released keys leave
//	cd bench && ./run.sh -only renewal,permits,keys,queue  # any sections, by name
//
// It starts its own redis-server, ZooKeeper (the Debian package's jars) and
// an embedded etcd (in a child process) on free loopback ports, in their
// default durable configuration unless -variant nofsync says otherwise, and
// stops them at the end. The figures the targets table judges are measured
// in -rounds rounds (3), each round running every library in turn, and shown
// as medians and ranges. Every loop is bounded in count and in time.
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
	// variant is the servers' configuration (-variant); a run of the
	// nofsync variant writes its report only where -out says, so that the
	// committed report stays the durable one.
	variant variant
	// rounds is how many times the round-trip floor, the uncontended
	// cycle, the contended runs at 8 and 32 contenders and the permits
	// section run (-rounds); the first round runs every contended
	// configuration.
	rounds int
	// queueLoad is the machine load the many-waiters section runs at
	// (-queue-load; see loadgen.go).
	queueLoad float64
}

// results is everything one run measured; it is also written as JSON.
type results struct {
	Start, End time.Time
	Command    string
	Variant    variant
	Rounds     int
	Sections   []sectionRun
	Machine    machineInfo
	Versions   map[string]string
	Libraries  []libInfo
	// RTT is the round-trip floor: for each request the round with the
	// median p50 (medianRTT); RTTRounds has every round's.
	RTT         map[string]rttResult
	RTTRounds   []map[string]rttResult
	Uncontended []uncontendedResult
	Contended   []contendedResult
	// CycleFloor and HandoffFloor are the floors of the targets table,
	// measured in each round among the libraries' uncontended and
	// contended runs (floors.go); runs older than them have none.
	CycleFloor   []floorResult
	HandoffFloor []floorResult
	ClientCost   []clientCostResult
	Queue        []queueResult
	Keys         []keysResult
	Memory       []memoryResult
	Modes        []modeResult
	Election     []electionResult
	Permits      []modeResult
	Renewal      []renewalResult
	Gateway      []gatewayResult
	Replicas     []replicasResult
	Notes        []string

	// HandoffFloorBehind is the hand-off's second floor, one notification
	// behind another client's write (floors_behind.go), measured with
	// HandoffFloor and shown beside it; runs older than it have none.
	HandoffFloorBehind []floorResult
}

type libInfo struct {
	Name, Backend, Module, Version, Waiting, Missing string
	IsDlock                                          bool
}

func main() {
	if len(os.Args) == 6 && os.Args[1] == "serve-etcd" {
		if err := serveEtcd(os.Args[2], os.Args[3], os.Args[4], variant(os.Args[5])); err != nil {
			fmt.Fprintln(os.Stderr, "serve-etcd:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "spin" {
		spin() // a CPU-spinning child of atLoad (loadgen.go)
		return
	}
	testing.Init() // for testing.Benchmark (client cost)
	var cfg config
	var only, sections, variantName string
	flag.StringVar(&cfg.out, "out", defaultOut, "directory for benchmarks.md and benchmarks.png")
	flag.BoolVar(&cfg.quick, "quick", false, "smoke test: short windows and small scale tests (does not write the report unless -out is given)")
	flag.DurationVar(&cfg.window, "window", 2*time.Second, "measuring window of each contended run")
	flag.DurationVar(&cfg.warmup, "warmup", 300*time.Millisecond, "warm-up before each contended window")
	flag.StringVar(&only, "only", "", "run only the libraries whose name matches this regexp; or, with section names (comma-separated: "+strings.Join(onlyNames, ", ")+"), only those sections (and the round-trip floor where their tables are in RTTs)")
	flag.StringVar(&variantName, "variant", string(durable), "servers' configuration: durable (each server's defaults: Redis RDB snapshots, ZooKeeper forceSync=yes, etcd fsync) or nofsync (nothing kept that must survive; writes its report only where -out says)")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds of the round-trip floor, uncontended cycle, contended runs at 8 and 32 contenders, keys and permits sections, shown as medians and ranges (1 with -quick unless given)")
	flag.Float64Var(&cfg.queueLoad, "queue-load", 3, "machine load for the many-waiters section: CPU-spinning processes make up what the machine's runnable tasks fall short of it (0: none)")
	flag.DurationVar(&cfg.modesHold, "modes-hold", modeHold, "how long each holder of the modes section holds its lease (the work a permit guards)")
	flag.IntVar(&cfg.queueN, "queue-waiters", 0, "override the number of waiters of the queue test (0: per library, see queueSize)")
	flag.StringVar(&cfg.from, "from", "", "do not measure: write the report and chart from this results.json of an earlier run")
	flag.StringVar(&sections, "sections", strings.Join(allSections, ","), "sections to run; when given, the report is written only where -out says")
	flag.Parse()
	var err error
	if cfg.variant, err = parseVariant(variantName); err != nil {
		log.Fatal(err)
	}
	if cfg.variant != durable {
		cfg.partial = true
	}
	cfg.modes = modeWorkloads
	cfg.partial = cfg.partial || flagGiven("sections")
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
		if !flagGiven("rounds") {
			cfg.rounds = 1
		}
	}
	cfg.rounds = max(cfg.rounds, 1)
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
	res := &results{Start: time.Now(), Variant: cfg.variant, Rounds: cfg.rounds,
		Command: "cd bench && " + strings.Join(append([]string{"go run ."}, os.Args[1:]...), " ")}
	if c := os.Getenv("BENCH_COMMAND"); c != "" {
		res.Command = c
	}
	res.Machine = machine()
	log.Printf("machine: %d CPUs, %s, load %s; servers %s", res.Machine.NumCPU, res.Machine.CPU, res.Machine.LoadBefore, cfg.variant)

	// Servers, started in parallel.
	s := &servers{env: &env{}}
	var wg sync.WaitGroup
	var rerr, zerr, eerr error
	wg.Go(func() { s.redis, rerr = startRedis(cfg.variant) })
	wg.Go(func() { s.zk, zerr = startZooKeeper(cfg.variant) })
	wg.Go(func() { s.etcd, eerr = startEtcd(cfg.variant) })
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

	// The figures of the targets table, round after round: each round runs
	// every library in turn, so that a busy spell of the machine falls on
	// all of them, not on one, and each server's libraries start one place
	// later each round (inRoundOrder), so that none always runs first.
	for round := 1; round <= cfg.rounds; round++ {
		if cfg.sections["rtt"] {
			var err error
			res.section(fmt.Sprintf("round-trip floor, round %d", round), func() {
				var rtt map[string]rttResult
				if rtt, err = runRTT(s, map[bool]int{false: 3000, true: 500}[cfg.quick]); err == nil {
					res.RTTRounds = append(res.RTTRounds, rtt)
					for _, b := range rttKeys {
						log.Printf("  %s %s: p50 %v p99 %v %s", rtt[b].Backend, rtt[b].Op, rtt[b].P50, rtt[b].P99, rtt[b].Err)
					}
				}
			})
			if err != nil {
				return err
			}
			res.RTT = medianRTT(res.RTTRounds)
		}
		if cfg.sections["uncontended"] {
			res.section(fmt.Sprintf("uncontended, round %d", round), func() {
				n, limit := 2000, 3*time.Second
				if cfg.quick {
					n, limit = 300, time.Second
				}
				floors := newCycleFloors(s, libs, n, limit)
				for _, l := range inRoundOrder(libs, round) {
					floors.before(l)
					if l.Missing != "" {
						continue
					}
					r := runUncontended(s, l, n, limit)
					r.Round = round
					log.Printf("uncontended %-18s n=%d p50 %v p99 %v req/cycle %.2f %s", l.Name, r.N, r.P50, r.P99, r.RequestsPerGrnt, r.Err)
					res.Uncontended = append(res.Uncontended, r)
				}
				for _, f := range floors.results(round) {
					logFloor("cycle", f)
					res.CycleFloor = append(res.CycleFloor, f)
				}
			})
		}
		if cfg.sections["contended"] {
			res.section(fmt.Sprintf("contended, round %d", round), func() {
				runContendedSection(s, libs, cfg, round, res)
			})
		}
	}
	if cfg.sections["modes"] {
		res.section("modes", func() { res.Modes = runModesSection(s, libs, cfg) })
	}
	if cfg.sections["permits"] {
		res.section("permits", func() { res.Permits = runPermitsSection(s, libs, cfg) })
	}
	if cfg.sections["election"] {
		res.section("election", func() { res.Election = runElectionSection(s, libs, cfg) })
	}
	if cfg.sections["cost"] {
		res.section("client cost", func() {
			bt := "1s"
			if cfg.quick {
				bt = "200ms"
			}
			_ = flag.Set("test.benchtime", bt)
			for _, l := range libs {
				if l.Missing != "" {
					continue
				}
				r := runClientCost(s, l)
				log.Printf("client cost %-18s %s", l.Name, r)
				res.ClientCost = append(res.ClientCost, r)
			}
		})
	}
	if cfg.sections["renewal"] {
		res.section("renewal", func() { res.Renewal = runRenewalSection(s, libs, cfg.quick) })
	}
	if cfg.sections["keys"] {
		// In rounds, as the targets' other figures: a library's rate moves
		// 1.5× between runs minutes apart on a shared machine.
		res.section("keys", func() {
			for round := 1; round <= cfg.rounds; round++ {
				for _, l := range inRoundOrder(libs, round) {
					if l.Missing != "" {
						continue
					}
					keys := keysSize(cfg.quick)
					r := runKeys(s, l, round, keys, keysWorkers, keysLimit)
					log.Printf("keys %-18s round %d: keys %d of %d in %v: %.0f locks/s %s", l.Name, round, r.Done, r.Keys, r.Elapsed.Round(time.Millisecond), r.LocksPerS(), r.Err)
					res.Keys = append(res.Keys, r)
				}
			}
		})
	}
	if cfg.sections["queue"] {
		res.section("queue", func() {
			for _, l := range libs {
				if l.Missing != "" {
					continue
				}
				waiters, note := queueSize(l, cfg.quick)
				if cfg.queueN > 0 {
					waiters, note = cfg.queueN, ""
				}
				r := runQueueAtLoad(s, l, waiters, 16, queueLimit, cfg.queueLoad)
				if note != "" {
					r.Note = strings.TrimPrefix(r.Note+"; "+note, "; ")
				}
				log.Printf("queue %-18s waiters %d enqueue %v drain %v drained %d (%.0f grants/s) load %s mem/waiter %.0f B overlaps %d %s %s",
					l.Name, r.Waiters, r.Enqueue, r.Drain, r.Drained, r.GrantsPerS(), r.Load, r.MemPerWait, r.Overlaps, r.Note, r.Err)
				res.Queue = append(res.Queue, r)
			}
		})
	}
	if cfg.sections["memory"] {
		res.section("memory", func() { res.Memory = runMemorySection(libs, cfg.quick, cfg.variant) })
	}
	if cfg.sections["gateway"] {
		res.section("gateway", func() { res.Gateway = runGatewaySection(s, libs, cfg) })
	}
	if cfg.sections["replicas"] {
		res.section("replicas", func() { res.Replicas = runReplicasSection(cfg) })
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

// runContendedSection runs the contended configurations of one round:
// every number of contenders, with and without think time, in the first
// round; the headline ones (8 and 32 contenders, no think time) in the
// others.
func runContendedSection(s *servers, libs []*library, cfg config, round int, res *results) {
	floors := newHandoffFloors(s, libs, cfg.warmup, cfg.window)
	defer func() {
		lone, behind := floors.results(round)
		for _, f := range lone {
			logFloor("hand-off", f)
			res.HandoffFloor = append(res.HandoffFloor, f)
		}
		for _, f := range behind {
			logFloor("hand-off behind a write", f)
			res.HandoffFloorBehind = append(res.HandoffFloorBehind, f)
		}
	}()
	if round == 1 {
		warmContended(s, libs, cfg)
	}
	for _, l := range inRoundOrder(libs, round) {
		floors.before(l)
		if l.Missing != "" {
			continue
		}
		for _, n := range cfg.ns {
			for _, think := range []bool{false, true} {
				if round > 1 && (think || !slices.Contains(headlineContenders, n)) {
					continue
				}
				// Fresh clients and a fresh key for every run: a run
				// that ends can leave a lock behind (a request cut by
				// the end of its context), and must not slow the next.
				t0 := time.Now()
				cs, err := newContenders(s, l, n, fmt.Sprintf("contended-%d-%v-%d", n, think, round))
				if err != nil {
					log.Printf("contended %s n=%d: %v", l.Name, n, err)
					res.Contended = append(res.Contended, contendedResult{Lib: l.Name, N: n, Think: think, Round: round, FirstErr: err.Error()})
					continue
				}
				setup := time.Since(t0)
				r := runContended(s, l, cs, think, cfg.warmup, cfg.window)
				r.Setup, r.Round = setup, round
				log.Printf("contended %-18s n=%-3d think=%-5v grants/s %7.0f handoff p50 %8v p99 %8v barged %4.0f%% fair %d/%d overlaps %d req/grant %.2f errs %d stuck %d %s",
					l.Name, n, think, r.GrantsPerS, r.HandoffP50, r.HandoffP99, 100*float64(r.SelfRetakes)/float64(max(r.Grants, 1)),
					r.MinGrants, r.MaxGrants, r.Overlaps, r.Delta.Requests/float64(max(r.Grants, 1)), r.Errors, r.Stuck, r.FirstErr)
				res.Contended = append(res.Contended, r)
				closeAll(cs)
			}
		}
	}
}

// warmContended runs each server's first library once at 2 contenders
// and discards the figures: a server's first contended run is slow (the
// JVM compiling ZooKeeper's write path; go-zookeeper's own Lock got 722
// grants/s run first against 2,400–3,200 run later), and that would fall on
// whichever library the round puts first.
func warmContended(s *servers, libs []*library, cfg config) {
	seen := map[string]bool{}
	for _, l := range libs {
		if l.Missing != "" || seen[l.Backend] {
			continue
		}
		seen[l.Backend] = true
		cs, err := newContenders(s, l, 2, "contended-warm")
		if err != nil {
			log.Printf("contended warm-up %s: %v", l.Name, err)
			continue
		}
		r := runContended(s, l, cs, false, cfg.warmup, cfg.window)
		log.Printf("contended warm-up %-18s grants/s %7.0f (discarded)", l.Name, r.GrantsPerS)
		closeAll(cs)
	}
}

// headlineContenders are the contended configurations (no think time) that
// every round runs: 8 for the hand-off's latency and tail, 32 for grants/s.
var headlineContenders = []int{8, 32}

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

// queueLimit bounds each library's run of the many-waiters section: the
// enqueue and the drain together.
const queueLimit = 60 * time.Second
