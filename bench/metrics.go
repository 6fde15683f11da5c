package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// counters is a snapshot of a server's request counters.
type counters struct {
	// Requests sent to the server: a script call counts once. Redis: as
	// counted by the clients' hooks; ZooKeeper: zk_packets_received (which
	// includes the sessions' pings); etcd: gRPC messages received, unary
	// calls and stream messages alike.
	Requests float64
	// Redis only: script calls (EVAL, EVALSHA, FCALL…) and every command
	// the server ran, including those run inside scripts (commandstats).
	Scripts  float64
	Commands float64
	// ByOp is the server's count per command or gRPC method.
	ByOp map[string]float64
	// CPU is the server process's CPU time (user+system), in seconds.
	CPU float64
}

func (c counters) sub(o counters) counters {
	d := counters{Requests: c.Requests - o.Requests, Scripts: c.Scripts - o.Scripts, Commands: c.Commands - o.Commands, CPU: c.CPU - o.CPU, ByOp: map[string]float64{}}
	for k, v := range c.ByOp {
		if x := v - o.ByOp[k]; x != 0 {
			d.ByOp[k] = x
		}
	}
	return d
}

// servers bundles the running servers for the measurements.
type servers struct {
	redis, zk, etcd *server
	env             *env
}

func (s *servers) counters(backend string) (c counters, err error) {
	switch backend {
	case "redis":
		c, err = s.redisCounters()
		c.CPU = cpuSeconds(s.redis.pid())
	case "zookeeper":
		c, err = s.zkCounters()
		c.CPU = cpuSeconds(s.zk.pid())
	case "etcd":
		c, err = s.etcdCounters()
		c.CPU = cpuSeconds(s.etcd.pid())
	default:
		err = fmt.Errorf("unknown backend %q", backend)
	}
	return c, err
}

// cpuSeconds returns the user+system CPU time of a process (/proc/PID/stat,
// in clock ticks of 10 ms).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may contain spaces: count from its ')'.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

func (s *servers) redisInfo(section string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := rawCommand(ctx, s.redis.addr, "INFO "+section+"\r\n", "\r\n\r\n")
	if err != nil && !strings.Contains(out, "\r\n\r\n") {
		// A short section may end without the blank line; accept what came.
		if len(out) == 0 {
			return nil, err
		}
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

func (s *servers) redisCounters() (counters, error) {
	c := counters{ByOp: map[string]float64{}}
	c.Requests = float64(s.env.redisRequests.Load())
	info, err := s.redisInfo("commandstats")
	if err != nil {
		return c, err
	}
	for k, v := range info {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok || name == "info" {
			continue // our own INFO calls
		}
		calls, _ := strconv.ParseFloat(strings.TrimPrefix(strings.Split(v, ",")[0], "calls="), 64)
		c.ByOp[name] = calls
		c.Commands += calls
		if scriptCommands[name] {
			c.Scripts += calls
		}
	}
	return c, nil
}

func (s *servers) redisMemory() (int64, error) {
	used, clients, err := s.redisUsedMemory()
	// Leave out the client connections' buffers, which grow and shrink
	// with the connection pools, not with the locks.
	return used - clients, err
}

// redisUsedMemory returns Redis' used_memory and, within it, the normal
// clients' buffers (mem_clients_normal).
func (s *servers) redisUsedMemory() (used, clients int64, err error) {
	// Redis refreshes its count of client memory (mem_clients_normal) in
	// clientsCron, which visits every client about once a second: wait for
	// it, so that the connections that the pools opened during a test are
	// counted as clients, not as data.
	time.Sleep(1100 * time.Millisecond)
	info, err := s.redisInfo("memory")
	if err != nil {
		return 0, 0, err
	}
	used, err = strconv.ParseInt(info["used_memory"], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("used_memory: %w", err)
	}
	clients, _ = strconv.ParseInt(info["mem_clients_normal"], 10, 64)
	return used, clients, nil
}

// redisDBSize returns the number of keys in Redis' database (DBSIZE).
func (s *servers) redisDBSize() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := rawCommand(ctx, s.redis.addr, "DBSIZE\r\n", "\r\n")
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(out), ":"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("DBSIZE said %q", out)
	}
	return n, nil
}

func (s *servers) mntr() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := rawCommand(ctx, s.zk.addr, "mntr", "")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "\t"); ok {
			m[k] = v
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("mntr said %q", out)
	}
	return m, nil
}

func (s *servers) zkCounters() (counters, error) {
	m, err := s.mntr()
	if err != nil {
		return counters{}, err
	}
	p, _ := strconv.ParseFloat(m["zk_packets_received"], 64)
	c := counters{Requests: p, ByOp: map[string]float64{"packets_received": p}}
	// The transaction log's fsyncs: with two writes per grant, how often
	// they share one tells a contended run's mode (bench/analysis.md,
	// Profile: ZooKeeper contended modes).
	if v, err := strconv.ParseFloat(m["zk_cnt_fsynctime"], 64); err == nil {
		c.ByOp["fsyncs"] = v
	}
	return c, nil
}

// zkHeapOnce runs a full GC in the ZooKeeper JVM and returns its used heap
// in bytes, or 0 when jcmd fails.
func (s *servers) zkHeapOnce() int64 {
	pid := strconv.Itoa(s.zk.pid())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, "jcmd", pid, "GC.run").Run(); err != nil {
		return 0
	}
	out, err := exec.CommandContext(ctx, "jcmd", pid, "GC.heap_info").Output()
	if err != nil {
		return 0
	}
	// "def new generation   total 314560K, used 12345K ..." and
	// "tenured generation   total ..., used ...K": sum the used.
	var used int64
	for _, m := range heapUsedRE.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		used += n * 1024
	}
	return used
}

var heapUsedRE = regexp.MustCompile(`(?m)^\s*(def new generation|tenured generation).*used (\d+)K`)

// zkHeap runs a full GC in the ZooKeeper JVM and returns its used heap in
// bytes (jcmd GC.run, then GC.heap_info), or the process RSS when jcmd fails.
func (s *servers) zkHeap() (int64, string) {
	// Wait (up to 10 s) until the number of nodes stops changing: the
	// server deletes empty container nodes in the background.
	last := -1.0
	for i := 0; i < 10; i++ {
		m, err := s.mntr()
		if err != nil {
			break
		}
		n, _ := strconv.ParseFloat(m["zk_znode_count"], 64)
		if n == last {
			break
		}
		last = n
		time.Sleep(1100 * time.Millisecond)
	}
	// One full GC does not always leave only live objects (a reading now
	// and then comes out megabytes higher): take the least of three.
	var best int64 = -1
	for range 3 {
		if used := s.zkHeapOnce(); used > 0 && (best < 0 || used < best) {
			best = used
		}
	}
	if best > 0 {
		return best, "JVM heap used after a full GC (jcmd; least of 3)"
	}
	return rssBytes(s.zk.pid()), "process RSS"
}

var grpcMsgRE = regexp.MustCompile(`^grpc_server_msg_received_total\{(.*)\} ([0-9.e+]+)$`)
var grpcMethodRE = regexp.MustCompile(`grpc_method="([^"]+)"`)

func (s *servers) etcdMetrics() (map[string]float64, error) {
	out, err := httpGet("http://" + s.etcd.metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if g := grpcMsgRE.FindStringSubmatch(line); g != nil {
			v, _ := strconv.ParseFloat(g[2], 64)
			if mm := grpcMethodRE.FindStringSubmatch(g[1]); mm != nil {
				m["grpc:"+mm[1]] += v
			}
			continue
		}
		for _, name := range []string{"etcd_mvcc_db_total_size_in_use_in_bytes", "etcd_debugging_mvcc_keys_total", "etcd_debugging_mvcc_watcher_total", "etcd_debugging_mvcc_slow_watcher_total"} {
			if rest, ok := strings.CutPrefix(line, name+" "); ok {
				v, _ := strconv.ParseFloat(rest, 64)
				m[name] = v
			}
		}
	}
	return m, nil
}

func (s *servers) etcdCounters() (counters, error) {
	m, err := s.etcdMetrics()
	if err != nil {
		return counters{}, err
	}
	c := counters{ByOp: map[string]float64{}}
	for k, v := range m {
		if name, ok := strings.CutPrefix(k, "grpc:"); ok {
			c.ByOp[name] = v
			c.Requests += v
		}
	}
	return c, nil
}

// etcdHeap returns the etcd child's live heap after a GC.
func (s *servers) etcdHeap() (int64, error) {
	out, err := httpGet("http://" + s.etcd.metricsAddr + "/heap")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(out), 10, 64)
}

// memory returns a backend server's memory in use, and what was measured.
func (s *servers) memory(backend string) (int64, string) {
	switch backend {
	case "redis":
		n, err := s.redisMemory()
		if err != nil {
			return 0, "error: " + err.Error()
		}
		return n, "Redis used_memory less mem_clients_normal"
	case "zookeeper":
		return s.zkHeap()
	case "etcd":
		n, err := s.etcdHeap()
		if err != nil {
			return 0, "error: " + err.Error()
		}
		return n, "Go heap in use after a GC (etcd process)"
	}
	return 0, "?"
}
