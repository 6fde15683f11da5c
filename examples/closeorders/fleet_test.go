package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// TestMain lets the test binary serve as the closeorders command, so that
// the fleet test runs real processes without building another binary.
func TestMain(m *testing.M) {
	if os.Getenv("CLOSEORDERS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	fleetSize  = 5
	fleetTicks = 20
	tick       = time.Second
	// hold is the minimum hold. The instances' clocks disagree by up to
	// hold/2 (their offsets): the other half is the margin for a loaded
	// machine's scheduling delays, on both sides (a late instance must
	// still find the key held; the next tick must find it free).
	hold      = 600 * time.Millisecond
	ttl       = 2 * time.Second
	dieAtTick = 8
)

type instance struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	exited chan struct{}
	at     time.Time // when the test saw it exit
}

// TestFleet_runsEachTickOnce: five instances (processes) fire the same
// schedule every second for 20 ticks, their clocks offset by up to half the
// minimum hold. Whoever wins tick 8 is killed in the middle of its job.
// Every tick's job must run exactly once across the fleet (the runs table,
// which each run writes with its tick), except the ticks that fell in the
// dead instance's TTL, which may run at most once; from the first tick after
// its TTL on, each runs exactly once again, and that run closes the orders
// the dead instance left. Without dlock.NoWait the five would run every
// tick one after another; without dlock.HoldAtLeast the instances whose
// clocks are behind would run it again after the first one's quick job.
func TestFleet_runsEachTickOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 20 ticks of a second")
	}
	url := testserver.StartRedis(t).URL()
	db := t.TempDir() + "/orders.db"
	ctx, cancel := context.WithTimeout(context.Background(), fleetTicks*tick+90*time.Second) // the watchdog
	defer cancel()
	if err := initOrders(ctx, db, 3*fleetTicks); err != nil {
		t.Fatal(err)
	}

	var fleet []*instance
	defer func() {
		for _, in := range fleet {
			_ = in.cmd.Process.Kill()
			<-in.exited
		}
	}()
	for i := range fleetSize {
		in := &instance{name: fmt.Sprintf("i%d", i), exited: make(chan struct{})}
		offset := time.Duration(i) * hold / (2 * (fleetSize - 1))
		in.cmd = exec.Command(os.Args[0], "--backend", url, "--db", db, "--instance", in.name,
			"--ticks", strconv.Itoa(fleetTicks), "--tick", tick.String(), "--hold", hold.String(),
			"--ttl", ttl.String(), "--clock-offset", offset.String(), "--epoch-from-stdin",
			"--die-at-tick", strconv.Itoa(dieAtTick))
		in.cmd.Env = append(os.Environ(), "CLOSEORDERS_MAIN=1")
		in.cmd.Stderr = os.Stderr
		var err error
		if in.stdin, err = in.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		out, err := in.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		in.stdout = bufio.NewReader(out)
		if err := in.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, in)
	}
	// Start the schedule only once every instance is connected: one that
	// started late would fire its first ticks late.
	for _, in := range fleet {
		line, err := readLine(ctx, in.stdout)
		if err != nil || line != "ready\n" {
			t.Fatalf("instance %s: %q, %v; want ready", in.name, line, err)
		}
	}
	epoch := time.Now().Add(200 * time.Millisecond).Truncate(time.Millisecond)
	for _, in := range fleet {
		fmt.Fprintln(in.stdin, epoch.UnixMilli())
		go func() {
			_, _ = io.Copy(io.Discard, in.stdout)
			_ = in.cmd.Wait()
			in.at = time.Now()
			close(in.exited)
		}()
	}
	var died *instance
	for _, in := range fleet {
		select {
		case <-in.exited:
		case <-ctx.Done():
			t.Fatalf("instance %s still runs (watchdog)", in.name)
		}
		ws := in.cmd.ProcessState.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled() && ws.Signal() == syscall.SIGKILL && died == nil:
			died = in
		case !in.cmd.ProcessState.Success():
			t.Fatalf("instance %s ended with %v", in.name, in.cmd.ProcessState)
		}
	}
	if died == nil {
		t.Fatalf("nobody was killed at tick %d: did tick %d run?", dieAtTick, dieAtTick)
	}
	fleet = nil

	checkRuns(t, ctx, db, epoch, died)
}

func readLine(ctx context.Context, r *bufio.Reader) (string, error) {
	type res struct {
		s   string
		err error
	}
	c := make(chan res, 1)
	go func() { s, err := r.ReadString('\n'); c <- res{s, err} }()
	select {
	case v := <-c:
		return v.s, v.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func checkRuns(t *testing.T, ctx context.Context, path string, epoch time.Time, died *instance) {
	db, err := openDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT tick, instance, token FROM runs ORDER BY tick, token`)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[int][]string{}
	var lastToken int64
	for rows.Next() {
		var k int
		var who string
		var token int64
		if err := rows.Scan(&k, &who, &token); err != nil {
			t.Fatal(err)
		}
		if token <= lastToken {
			t.Errorf("tick %d: token %d not above the earlier run's %d", k, token, lastToken)
		}
		lastToken = token
		runs[k] = append(runs[k], who)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("runs by tick: %v; %s died at tick %d", runs, died.name, dieAtTick)
	// The dead instance's key is free at the latest a TTL after it died
	// (it had renewed the lease at the latest when it died); every tick
	// that fires after that must run.
	freed := died.at.Add(ttl)
	for k := 1; k <= fleetTicks; k++ {
		fires := epoch.Add(time.Duration(k) * tick) // the earliest instance's firing
		n := len(runs[k])
		switch {
		case n > 1:
			t.Errorf("tick %d ran %d times: %v", k, n, runs[k])
		case n == 0 && (k <= dieAtTick || !fires.Before(freed)):
			t.Errorf("tick %d did not run, with instances alive and the key free", k)
		}
	}
	if w := runs[dieAtTick]; len(w) != 1 || w[0] != died.name {
		t.Errorf("tick %d ran on %v, want the killed instance %s", dieAtTick, w, died.name)
	}

	// Every order is closed, once, by a run of its tick or, for the dead
	// instance's, of a later one.
	var open, wrong int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE state != 'closed'`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders o WHERE closed_tick < expires_tick
		OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.tick = o.closed_tick AND r.instance = o.closed_by)`).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	var late int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE expires_tick = ? AND closed_tick > ?`, dieAtTick, dieAtTick).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if open != 0 || wrong != 0 || late != 3 {
		t.Errorf("orders: %d open, %d closed before expiry or by no run, %d of tick %d closed later (want 0, 0, 3)", open, wrong, late, dieAtTick)
	}
}
