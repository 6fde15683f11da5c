package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

type machineInfo struct {
	NumCPU     int
	CPU        string
	Memory     string // free -h
	Kernel     string
	LoadBefore string
	LoadAfter  string
}

func machine() machineInfo {
	m := machineInfo{NumCPU: runtime.NumCPU(), LoadBefore: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	m.Memory = strings.TrimSpace(cmdOut("free", "-h"))
	m.Kernel = strings.TrimSpace(cmdOut("uname", "-sr"))
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func cmdOut(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

// versions returns the exact versions of Go, the servers and every module.
func versions(s *servers) map[string]string {
	v := map[string]string{"go": runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			v[d.Path] = d.Version
		}
	}
	// dlock itself is the working tree (the workspace): name its commit.
	if c := strings.TrimSpace(cmdOut("git", "-C", "..", "rev-parse", "--short", "HEAD")); c != "" {
		dirty := ""
		if strings.TrimSpace(cmdOut("git", "-C", "..", "status", "--porcelain", "--untracked-files=no")) != "" {
			dirty = " + uncommitted changes"
		}
		v["github.com/dlockdev/dlock"] = "working tree at " + c + dirty
	}
	if info, err := s.redisInfo("server"); err == nil {
		v["redis-server"] = info["redis_version"]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := rawCommand(ctx, s.zk.addr, "srvr", ""); err == nil {
		first, _, _ := strings.Cut(out, "\n")
		v["zookeeper"] = strings.TrimSpace(strings.TrimPrefix(first, "Zookeeper version:"))
	}
	if jv := cmdOut("java", "-version"); jv != "" {
		first, _, _ := strings.Cut(jv, "\n")
		v["java"] = strings.TrimSpace(first)
	}
	v["etcd"] = v["go.etcd.io/etcd/server/v3"] + " (embedded, go.etcd.io/etcd/server/v3/embed)"
	return v
}
