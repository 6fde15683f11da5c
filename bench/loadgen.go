package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ---- machine load for the many-waiters section ----

// A section run "at load L" runs with about L runnable tasks on the
// machine: the benchmark and its servers, whatever else the machine runs,
// and CPU-spinning processes ("bench spin", children of this one) that make
// up the difference. The runnable tasks are the kernel's procs_running
// (/proc/stat), sampled every 100 ms; a controller resumes a spinner
// (SIGCONT) when their recent mean is below L − ½ and stops one (SIGSTOP)
// when it is above L + ½, so that the benchmark's own work counts towards
// L. The report shows the mean during the run beside the target.

// loadInfo is what a run at a load target saw.
type loadInfo struct {
	Target   float64 // runnable tasks aimed at
	Mean     float64 // mean runnable tasks during the run, spinners included
	Spinners float64 // mean spinners running
	LoadAvg  string  // load average (1, 5, 15 min) at the end
}

func (l loadInfo) String() string {
	if l.Target == 0 && l.Mean == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f runnable (target %g; %.1f of them spinners)", l.Mean, l.Target, l.Spinners)
}

// spin is the child process of a spinner: it keeps one CPU busy until its
// standard input closes (the parent ended it, or went away).
func spin() {
	runtime.GOMAXPROCS(1)
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	for x := 0; ; x++ {
		if x%(1<<20) == 0 {
			select {
			case <-done:
				return
			default:
			}
		}
	}
}

// procsRunning is the number of runnable tasks now, this reader left out.
func procsRunning() float64 {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return math.NaN()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "procs_running "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n - 1
		}
	}
	return math.NaN()
}

// atLoad runs f with about target runnable tasks on the machine (see
// above); a target of 0 adds no spinner and only measures.
func atLoad(target float64, f func()) loadInfo {
	li := loadInfo{Target: target}
	var spinners []*exec.Cmd
	var stdins []io.Closer
	if self, err := os.Executable(); err == nil && target > 0 {
		for range int(math.Ceil(target)) {
			cmd := exec.Command(self, "spin")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			in, err := cmd.StdinPipe()
			if err != nil {
				break
			}
			if err := cmd.Start(); err != nil {
				break
			}
			_ = cmd.Process.Signal(syscall.SIGSTOP)
			spinners, stdins = append(spinners, cmd), append(stdins, in)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		var sum, active float64
		n, running := 0, 0
		recent := math.NaN()
		for {
			if x := procsRunning(); !math.IsNaN(x) {
				sum, active, n = sum+x, active+float64(running), n+1
				if math.IsNaN(recent) {
					recent = x
				}
				recent = 0.8*recent + 0.2*x // about the last half second
				switch {
				case recent < target-0.5 && running < len(spinners):
					_ = spinners[running].Process.Signal(syscall.SIGCONT)
					running++
				case recent > target+0.5 && running > 0:
					running--
					_ = spinners[running].Process.Signal(syscall.SIGSTOP)
				}
			}
			select {
			case <-stop:
				if n > 0 {
					li.Mean, li.Spinners = sum/float64(n), active/float64(n)
				}
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	for i, cmd := range spinners {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process would not see its input close
		_ = stdins[i].Close()
	}
	for _, cmd := range spinners {
		_ = cmd.Wait()
	}
	li.LoadAvg = loadavg()
	return li
}
