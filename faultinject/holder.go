package faultinject

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// HolderEnv is the environment variable that turns a test binary (or the
// weak holder program) into a holder process: it holds the holder's
// configuration as JSON.
const HolderEnv = "FAULTINJECT_HOLDER"

// HolderConfig configures a holder process.
type HolderConfig struct {
	Name    string   `json:"name"`
	Backend string   `json:"backend"` // redis, redis-sentinel, zk, naive-redis, naive-zk, etcd
	Addrs   []string `json:"addrs"`   // servers, proxies or Sentinels
	Master  string   `json:"master,omitempty"`

	TTL           time.Duration `json:"ttl"`
	WaiterTimeout time.Duration `json:"waiter_timeout,omitempty"` // redis
	// ClaimedTimeout, for zk, is the lease length given to zkdlock.New
	// when it differs from the session timeout actually negotiated (TTL):
	// the misconfiguration the zkdlock documentation warns about.
	ClaimedTimeout time.Duration `json:"claimed_timeout,omitempty"`

	Resource string   `json:"resource"` // resource server address
	Targets  []string `json:"targets"`  // resource names each write goes to
	Seed     uint64   `json:"seed"`
}

// Command is a request from the harness to a holder, one JSON line on the
// holder's stdin.
type Command struct {
	ID  int    `json:"id"`
	Op  string `json:"op"` // lock, cancel, write, state, unlock, inspect, contend, loop, drop_reply, restore, close
	Key string `json:"key,omitempty"`

	Wait        bool          `json:"wait,omitempty"`         // lock: Lock rather than TryLock
	Timeout     time.Duration `json:"timeout,omitempty"`      // lock, unlock, loop: per call
	CancelAfter time.Duration `json:"cancel_after,omitempty"` // lock: cancel the wait then

	N       int      `json:"n,omitempty"` // write: how many
	Value   string   `json:"value,omitempty"`
	Targets []string `json:"targets,omitempty"` // write: resources, instead of the configured ones

	Workers   int           `json:"workers,omitempty"`    // contend
	Rounds    int           `json:"rounds,omitempty"`     // contend
	CancelMax time.Duration `json:"cancel_max,omitempty"` // contend: cancel within [0, CancelMax)
	Hold      time.Duration `json:"hold,omitempty"`       // contend, loop: time in the critical section
	Duration  time.Duration `json:"duration,omitempty"`   // loop
	Writes    int           `json:"writes,omitempty"`     // loop: writes per lease
	Quick     bool          `json:"quick,omitempty"`      // close: do not wait for lingering goroutines
	Method    string        `json:"method,omitempty"`     // drop_reply (etcd): the gRPC method, e.g. KV/Txn
	HoldAfter bool          `json:"hold_after,omitempty"` // drop_reply: hold the retries until restore
}

// Event is a line a holder prints on stdout: the reply to a command (ID
// set) or a notice (ID 0). Times are Mono.
type Event struct {
	ID   int    `json:"id,omitempty"`
	Ev   string `json:"ev"`
	Name string `json:"name"`
	PID  int    `json:"pid,omitempty"`

	Call  int64  `json:"call,omitempty"`
	Ret   int64  `json:"ret,omitempty"`
	At    int64  `json:"at,omitempty"`
	Token uint64 `json:"token,omitempty"`

	// Deadline is the lease's local deadline (Lease.Deadline) in Mono.
	Deadline int64  `json:"deadline,omitempty"`
	Held     bool   `json:"held,omitempty"`
	Err      string `json:"err,omitempty"`
	Kind     string `json:"kind,omitempty"` // error class: locked, canceled, notheld, unavailable, closed, other

	Writes []WriteResult `json:"writes,omitempty"`

	// inspect
	HolderPID int `json:"holder_pid,omitempty"`
	Waiters   int `json:"waiters,omitempty"`

	// contend
	Acquired  int      `json:"acquired,omitempty"`
	Cancelled int      `json:"cancelled,omitempty"`
	Errors    []string `json:"errors,omitempty"`

	// loop
	Lease *LeaseRecord `json:"lease,omitempty"`

	// close: goroutines still running 20 s after Close (Leaks), and those
	// that outlived Close by more than a second but ended by then
	// (Lingered, with how long).
	Leaks     string        `json:"leaks,omitempty"`
	Lingered  string        `json:"lingered,omitempty"`
	LingerFor time.Duration `json:"linger_for,omitempty"`
}

// WriteResult is one write by a holder.
type WriteResult struct {
	DoneBefore bool            `json:"done_before"` // Done was closed just before the write
	Call       int64           `json:"call"`
	At         int64           `json:"at"` // when the resource decided
	Ret        int64           `json:"ret"`
	Value      string          `json:"value"`
	Accepted   map[string]bool `json:"accepted"`
	Err        string          `json:"err,omitempty"`
}

// LeaseRecord is one lease of a holder's loop, for the history checks.
type LeaseRecord struct {
	Holder     string        `json:"holder"`
	Token      uint64        `json:"token"`
	LockCall   int64         `json:"lock_call"`
	LockRet    int64         `json:"lock_ret"`
	Writes     []WriteResult `json:"writes,omitempty"`
	DoneAt     int64         `json:"done_at,omitempty"` // when the holder saw Done closed before unlocking; 0 if not
	Deadline   int64         `json:"deadline"`          // the lease's local deadline when the holder stopped using it
	UnlockCall int64         `json:"unlock_call"`
	UnlockRet  int64         `json:"unlock_ret"`
	UnlockKind string        `json:"unlock_kind,omitempty"` // "" when Unlock returned nil
}

// End is the moment after which the holder no longer relied on the lease:
// the earliest of its deadline, the moment it saw the loss, and its Unlock.
func (r *LeaseRecord) End() int64 {
	end := min(r.Deadline, r.UnlockCall)
	if r.DoneAt != 0 {
		end = min(end, r.DoneAt)
	}
	return end
}

// HolderMain runs a holder process and exits. It is the main function of
// the holders that the tests start, by re-executing the test binary with
// HolderEnv set, or by running the weak holder program.
func HolderMain() {
	var cfg HolderConfig
	if err := json.Unmarshal([]byte(os.Getenv(HolderEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "holder: bad %s: %v\n", HolderEnv, err)
		os.Exit(2)
	}
	redis.SetLogger(quietRedisLogger{})
	h := &holder{cfg: cfg, out: bufio.NewWriter(os.Stdout), rng: rand.New(rand.NewPCG(cfg.Seed, uint64(os.Getpid())))}
	os.Exit(h.run(os.Stdin))
}

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

type holder struct {
	cfg    HolderConfig
	client *dlock.Client
	closer func() // closes what the client does not close itself
	res    *resourceClient
	rng    *rand.Rand

	outMu sync.Mutex
	out   *bufio.Writer

	grpc *grpcFaults // etcd: the fault interceptor

	mu         sync.Mutex
	lease      *dlock.Lease       // the lease of the last lock command; guarded by mu
	cancelLock context.CancelFunc // cancels a lock command in flight; guarded by mu
	inflight   sync.WaitGroup     // commands running
}

func (h *holder) current() *dlock.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

func (h *holder) emit(e Event) {
	e.Name = h.cfg.Name
	b, _ := json.Marshal(e)
	h.outMu.Lock()
	defer h.outMu.Unlock()
	_, _ = h.out.Write(append(b, '\n'))
	_ = h.out.Flush()
}

func (h *holder) run(in io.Reader) int {
	ignore := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	err := h.open(ctx)
	cancel()
	if err != nil {
		h.emit(Event{Ev: "fatal", Err: err.Error()})
		return 1
	}
	h.res = &resourceClient{addr: h.cfg.Resource}
	h.emit(Event{Ev: "ready", PID: os.Getpid()})
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var c Command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			h.emit(Event{Ev: "fatal", Err: "bad command: " + err.Error()})
			return 1
		}
		if c.Op == "close" {
			h.close(c, ignore)
			return 0
		}
		// Commands run concurrently, so that the harness can cancel a
		// waiting lock or look at a lease while a loop runs; it never
		// sends two commands that touch the same lease at once.
		h.inflight.Add(1)
		go func() {
			defer h.inflight.Done()
			h.emit(h.do(c))
		}()
	}
	// The harness went away: leave without ceremony.
	return 0
}

func (h *holder) open(ctx context.Context) error {
	cfg := h.cfg
	ttl := dlock.WithTTL(cfg.TTL)
	switch cfg.Backend {
	case "redis", "redis-sentinel":
		var rdb redis.UniversalClient
		if cfg.Backend == "redis" {
			rdb = redis.NewClient(&redis.Options{Addr: cfg.Addrs[0], ContextTimeoutEnabled: true})
		} else {
			rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: cfg.Master, SentinelAddrs: cfg.Addrs, ContextTimeoutEnabled: true})
		}
		c, err := redisdlock.New(ctx, rdb, &redisdlock.Options{WaiterTimeout: cfg.WaiterTimeout, ClientOptions: []dlock.Option{ttl}})
		if err != nil {
			_ = rdb.Close()
			return err
		}
		h.client, h.closer = c, func() { _ = rdb.Close() }
	case "zk":
		if cfg.ClaimedTimeout == 0 {
			c, err := dlock.Open(ctx, fmt.Sprintf("zk://%s%s?session_timeout=%v&connect_timeout=30s", strings.Join(cfg.Addrs, ","), zkdlock.DefaultRoot, cfg.TTL))
			if err != nil {
				return err
			}
			h.client = c
			return nil
		}
		conn, ev, err := zk.Connect(cfg.Addrs, cfg.TTL, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
		if err != nil {
			return err
		}
		for e := range ev {
			if e.State == zk.StateHasSession {
				break
			}
		}
		go drain(ev)
		c, err := zkdlock.New(ctx, conn, &zkdlock.Options{SessionTimeout: cfg.ClaimedTimeout})
		if err != nil {
			conn.Close()
			return err
		}
		h.client, h.closer = c, conn.Close
	case "naive-redis":
		rdb := redis.NewClient(&redis.Options{Addr: cfg.Addrs[0], ContextTimeoutEnabled: true})
		c, err := dlock.NewClient(&naiveRedis{rdb: rdb}, ttl)
		if err != nil {
			return err
		}
		h.client = c
	case "naive-zk":
		d, err := newNaiveZK(cfg.Addrs, cfg.TTL)
		if err != nil {
			return err
		}
		c, err := dlock.NewClient(d, ttl)
		if err != nil {
			return err
		}
		h.client = c
	case "etcd", "naive-etcd":
		return h.openEtcd(ctx, cfg)
	default:
		return fmt.Errorf("holder: unknown backend %q", cfg.Backend)
	}
	return nil
}

// errKind classifies an error for the harness.
func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, dlock.ErrLocked):
		return "locked"
	case errors.Is(err, dlock.ErrNotHeld):
		return "notheld"
	case errors.Is(err, dlock.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, dlock.ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func isDone(l *dlock.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

func (h *holder) do(c Command) Event {
	ev := Event{ID: c.ID, Ev: c.Op}
	switch c.Op {
	case "lock":
		timeout := c.Timeout
		if c.CancelAfter > 0 {
			timeout = c.CancelAfter
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		h.mu.Lock()
		h.cancelLock = cancel
		h.mu.Unlock()
		ev.Call = Mono()
		var l *dlock.Lease
		var err error
		if c.Wait {
			l, err = h.client.Lock(ctx, c.Key)
		} else {
			l, err = h.client.TryLock(ctx, c.Key)
		}
		ev.Ret = Mono()
		if err != nil {
			ev.Err, ev.Kind = err.Error(), errKind(err)
			return ev
		}
		h.mu.Lock()
		h.lease = l
		h.mu.Unlock()
		ev.Token, ev.Deadline, ev.Held = l.Token(), MonoOf(l.Deadline()), true
		go func() {
			<-l.Done()
			h.emit(Event{Ev: "done", At: Mono(), Token: l.Token(), Err: errText(l.Err()), Kind: errKind(l.Err())})
		}()
	case "drop_reply":
		if h.grpc == nil {
			ev.Err = "drop_reply: not an etcd holder"
			return ev
		}
		h.grpc.arm(c.Method, c.HoldAfter)
	case "restore":
		if h.grpc != nil {
			h.grpc.restore()
		}
	case "cancel":
		h.mu.Lock()
		if h.cancelLock != nil {
			h.cancelLock()
		}
		h.mu.Unlock()
	case "write":
		l := h.current()
		if l == nil {
			ev.Err = "no lease"
			return ev
		}
		for i := range max(c.N, 1) {
			ev.Writes = append(ev.Writes, h.write(l, fmt.Sprintf("%s-%d", c.Value, i), c.Targets))
		}
	case "state":
		l := h.current()
		if l == nil {
			ev.Err = "no lease"
			return ev
		}
		ev.Held = !isDone(l)
		ev.Token, ev.Deadline, ev.Err, ev.Kind = l.Token(), MonoOf(l.Deadline()), errText(l.Err()), errKind(l.Err())
	case "unlock":
		h.mu.Lock()
		l := h.lease
		h.lease = nil
		h.mu.Unlock()
		if l == nil {
			ev.Err = "no lease"
			return ev
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
		defer cancel()
		ev.Call = Mono()
		err := l.Unlock(ctx)
		ev.Ret = Mono()
		ev.Err, ev.Kind = errText(err), errKind(err)
	case "inspect":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		info, err := h.client.Inspect(ctx, c.Key)
		if err != nil {
			ev.Err, ev.Kind = err.Error(), errKind(err)
			return ev
		}
		if len(info.Holders) > 0 {
			ev.HolderPID, ev.Token = info.Holders[0].Metadata.PID, info.Holders[0].Token
		}
		ev.Waiters = len(info.Waiters)
	case "contend":
		h.contend(c, &ev)
	case "loop":
		h.loop(c, &ev)
	default:
		ev.Err = "unknown op " + c.Op
	}
	return ev
}

func (h *holder) write(l *dlock.Lease, value string, targets []string) WriteResult {
	done := isDone(l)
	if targets == nil {
		targets = h.cfg.Targets
	}
	rep, call, err := h.res.Write(h.cfg.Name, l.Token(), value, targets)
	w := WriteResult{DoneBefore: done, Call: call, At: rep.At, Ret: Mono(), Value: value, Accepted: rep.Accepted}
	if err != nil {
		w.Err = err.Error()
	} else if rep.Err != "" {
		w.Err = rep.Err
	}
	return w
}

// contend runs workers that each take the key Rounds times with a wait
// cancelled at a random moment within CancelMax; a worker that gets the key
// holds it for Hold and unlocks.
func (h *holder) contend(c Command, ev *Event) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	delays := make([][]time.Duration, c.Workers)
	for w := range delays {
		for range c.Rounds {
			delays[w] = append(delays[w], time.Duration(h.rng.Int64N(int64(c.CancelMax))))
		}
	}
	for w := range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, d := range delays[w] {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				l, err := h.client.Lock(ctx, c.Key)
				cancel()
				mu.Lock()
				switch errKind(err) {
				case "":
				case "canceled":
					ev.Cancelled++
				default:
					ev.Errors = append(ev.Errors, err.Error())
				}
				mu.Unlock()
				if err != nil {
					continue
				}
				if c.Hold > 0 {
					time.Sleep(c.Hold) // the critical section: the workload, not a synchronisation
				}
				uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
				uerr := l.Unlock(uctx)
				ucancel()
				mu.Lock()
				ev.Acquired++
				if uerr != nil {
					ev.Errors = append(ev.Errors, "unlock: "+uerr.Error())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// loop takes the key, writes to the resource, holds it and unlocks, over
// and over for Duration, reporting every lease.
func (h *holder) loop(c Command, ev *Event) {
	end := time.Now().Add(c.Duration)
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
		call := Mono()
		l, err := h.client.Lock(ctx, c.Key)
		ret := Mono()
		cancel()
		if err != nil {
			ev.Errors = append(ev.Errors, err.Error())
			if errKind(err) != "canceled" {
				// The server is down or restarting: do not spin.
				time.Sleep(50 * time.Millisecond) // back-off of the workload
			}
			continue
		}
		ev.Acquired++
		rec := &LeaseRecord{Holder: h.cfg.Name, Token: l.Token(), LockCall: call, LockRet: ret}
		for i := range max(c.Writes, 1) {
			if isDone(l) {
				break // a careful holder stops writing once the lease is lost
			}
			rec.Writes = append(rec.Writes, h.write(l, fmt.Sprintf("%s-%d-%d", h.cfg.Name, l.Token(), i), nil))
		}
		if c.Hold > 0 && !isDone(l) {
			t := time.NewTimer(time.Duration(h.rng.Int64N(int64(c.Hold))))
			select {
			case <-t.C:
			case <-l.Done():
			}
			t.Stop()
		}
		rec.Deadline = MonoOf(l.Deadline())
		if isDone(l) {
			rec.DoneAt = Mono()
		}
		uctx, ucancel := context.WithTimeout(context.Background(), c.Timeout)
		rec.UnlockCall = Mono()
		uerr := l.Unlock(uctx)
		rec.UnlockRet = Mono()
		ucancel()
		rec.UnlockKind = errKind(uerr)
		h.emit(Event{Ev: "lease", Lease: rec})
	}
}

func (h *holder) close(c Command, ignore goleak.Option) {
	ev := Event{ID: c.ID, Ev: "close"}
	if err := h.client.Close(); err != nil {
		ev.Err = err.Error()
	}
	h.inflight.Wait() // Close made waiting calls return
	if h.closer != nil {
		h.closer()
	}
	h.res.Close()
	closed := time.Now()
	if err := goleak.Find(ignore); err != nil {
		ev.Lingered = lingerSummary(err.Error())
		for !c.Quick && time.Since(closed) < 20*time.Second {
			if err = goleak.Find(ignore); err == nil {
				break
			}
		}
		ev.LingerFor = time.Since(closed)
		if err != nil {
			ev.Leaks = err.Error()
		}
	}
	h.emit(ev)
}

// lingerSummary names the functions that created the goroutines in a goleak
// report, for a one-line figure.
func lingerSummary(report string) string {
	var names []string
	for _, line := range strings.Split(report, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "created by "); ok {
			if i := strings.Index(rest, " in goroutine"); i >= 0 {
				rest = rest[:i]
			}
			names = append(names, rest)
		}
	}
	return strings.Join(names, ", ")
}
