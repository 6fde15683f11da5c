package testserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EtcdCluster is an etcd cluster of several member processes of
// EtcdBinary on loopback ports, for tests of what a client sees when one
// member stalls. Raft ticks are 100 ms and the election timeout 1 s, which
// race-instrumented clients on a loaded machine stand up to: a frozen
// leader is replaced within one to two seconds, and etcd's shortest lease
// is 2 s.
type EtcdCluster struct {
	t     testing.TB
	addrs []string // client host:port of each member
	procs []*Process
}

// StartEtcdCluster starts an n-member cluster for t alone, logging to t,
// and waits until every member follows one leader. The members are killed
// when t ends, after Thaw.
func StartEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	SkipIfShort(t)
	bin := EtcdBinary(t)
	c := &EtcdCluster{t: t}
	var names, peers, initial []string
	for i := range n {
		names = append(names, "m"+strconv.Itoa(i))
		c.addrs = append(c.addrs, Addr(FreePort(t)))
		peers = append(peers, "http://"+Addr(FreePort(t)))
		initial = append(initial, names[i]+"="+peers[i])
	}
	for i := range n {
		dir := t.TempDir()
		client := "http://" + c.addrs[i]
		c.procs = append(c.procs, StartProcess(t, "etcd-"+names[i], dir, bin, []string{
			"--name=" + names[i],
			"--data-dir=" + filepath.Join(dir, "data"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peers[i],
			"--initial-advertise-peer-urls=" + peers[i],
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-token=dlocktest",
			"--heartbeat-interval=100",
			"--election-timeout=1000",
			"--unsafe-no-fsync",
			"--log-level=error",
		}))
	}
	// SIGCONT before the kill: a stopped process dies on SIGKILL too, but
	// a test that failed with a member frozen should not leave it so
	// until then. Registered after StartProcess's, so it runs first.
	t.Cleanup(func() {
		for i := range c.procs {
			c.Thaw(i)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx, -1); err != nil {
		t.Fatalf("testserver: etcd cluster: %v", err)
	}
	return c
}

// Addrs returns the client host:port of each member.
func (c *EtcdCluster) Addrs() []string { return c.addrs }

// Freeze stops member i with SIGSTOP: its connections stay open and
// silent, as a stalled disk, a starved CPU or a paused VM leaves them.
func (c *EtcdCluster) Freeze(i int) { _ = c.procs[i].cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes member i after Freeze.
func (c *EtcdCluster) Thaw(i int) { _ = c.procs[i].cmd.Process.Signal(syscall.SIGCONT) }

// status is the part of etcd's Maintenance.Status reply (through its JSON
// gateway) that tells who leads.
type status struct {
	Header struct {
		MemberID string `json:"member_id"`
	} `json:"header"`
	Leader string `json:"leader"`
}

// Status returns member i's id and the id of the leader it follows ("0"
// or "" for none).
func (c *EtcdCluster) Status(ctx context.Context, i int) (self, leader string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addrs[i]+"/v3/maintenance/status", strings.NewReader("{}"))
	if err != nil {
		return "", "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var st status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return "", "", fmt.Errorf("member %d status: %w", i, err)
	}
	return st.Header.MemberID, st.Leader, nil
}

// WaitLeader waits until every member but skip (-1: none) follows one
// leader that is not skip, and returns that leader's index. It polls each
// member's status: etcd offers nothing to wait on.
func (c *EtcdCluster) WaitLeader(ctx context.Context, skip int) (int, error) {
	var last error
	for {
		ids := make([]string, len(c.addrs))
		leaders := map[string]bool{}
		for i := range c.addrs {
			if i == skip {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, time.Second)
			self, leader, err := c.Status(actx, i)
			cancel()
			if err != nil {
				last = err
				leader = ""
			}
			ids[i] = self
			leaders[leader] = true
		}
		if len(leaders) == 1 {
			for l := range leaders {
				for i, id := range ids {
					if l != "" && l != "0" && id == l {
						return i, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no leader that every running member follows: %w (last error: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond): // polling Status
		}
	}
}
