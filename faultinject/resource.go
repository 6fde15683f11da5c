package faultinject

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Resource is the fenced resource the holders write to: write(token,
// value) is accepted only when token is not below the highest token
// accepted so far, and every decision is logged with a Mono timestamp. It
// lives in the harness, never in a holder, so a frozen or cut-off holder
// cannot vouch for its own writes.
//
// An unchecked Resource accepts everything: it is the negative control that
// shows what the fencing check prevents.
type Resource struct {
	Name    string
	Checked bool

	mu  sync.Mutex
	max uint64        // highest token accepted; guarded by mu
	log []WriteRecord // guarded by mu
}

// WriteRecord is one write decision.
type WriteRecord struct {
	At       int64  `json:"at"`   // Mono time of the decision
	Call     int64  `json:"call"` // Mono time the holder sent the write
	Client   string `json:"client"`
	Token    uint64 `json:"token"`
	Value    string `json:"value"`
	Accepted bool   `json:"accepted"`
	Max      uint64 `json:"max"` // highest accepted token before this write
}

// write applies one write and returns whether it was accepted.
func (r *Resource) write(client string, token uint64, value string, call int64) WriteRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := WriteRecord{At: Mono(), Call: call, Client: client, Token: token, Value: value, Max: r.max}
	rec.Accepted = !r.Checked || token >= r.max
	if rec.Accepted && token > r.max {
		r.max = token
	}
	r.log = append(r.log, rec)
	return rec
}

// Log returns a copy of every decision so far, in order.
func (r *Resource) Log() []WriteRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]WriteRecord(nil), r.log...)
}

// ResourceServer serves resources to holder processes over loopback TCP,
// one JSON request per line.
type ResourceServer struct {
	ln        net.Listener
	resources map[string]*Resource
	logw      io.Writer

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

type writeRequest struct {
	Client  string   `json:"client"`
	Token   uint64   `json:"token"`
	Value   string   `json:"value"`
	Call    int64    `json:"call"`
	Targets []string `json:"targets"`
}

type writeReply struct {
	Accepted map[string]bool `json:"accepted"`
	At       int64           `json:"at"`
	Err      string          `json:"err,omitempty"`
}

// NewResourceServer serves rs. Every decision is also written to logw (one
// JSON line each) when it is not nil.
func NewResourceServer(logw io.Writer, rs ...*Resource) (*ResourceServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &ResourceServer{ln: ln, resources: map[string]*Resource{}, logw: logw, conns: map[net.Conn]struct{}{}}
	for _, r := range rs {
		s.resources[r.Name] = r
	}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Add serves r too, replacing any resource of the same name.
func (s *ResourceServer) Add(r *Resource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resources[r.Name] = r
}

// Addr is where holders connect.
func (s *ResourceServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server.
func (s *ResourceServer) Close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *ResourceServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *ResourceServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	sc := bufio.NewScanner(c)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req writeRequest
		rep := writeReply{Accepted: map[string]bool{}}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			rep.Err = err.Error()
		}
		for _, name := range req.Targets {
			s.mu.Lock()
			r := s.resources[name]
			s.mu.Unlock()
			if r == nil {
				rep.Err = fmt.Sprintf("no resource %q", name)
				continue
			}
			rec := r.write(req.Client, req.Token, req.Value, req.Call)
			rep.Accepted[name] = rec.Accepted
			rep.At = rec.At
			if s.logw != nil {
				s.mu.Lock()
				b, _ := json.Marshal(struct {
					Resource string `json:"resource"`
					WriteRecord
				}{name, rec})
				_, _ = s.logw.Write(append(b, '\n'))
				s.mu.Unlock()
			}
		}
		if err := enc.Encode(rep); err != nil {
			return
		}
	}
}

// resourceClient is a holder's connection to the resource server.
type resourceClient struct {
	mu   sync.Mutex
	addr string
	c    net.Conn
	sc   *bufio.Scanner
}

// Write sends one write to the named resources and returns their
// decisions. It redials once if the connection broke.
func (rc *resourceClient) Write(client string, token uint64, value string, targets []string) (writeReply, int64, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	call := Mono()
	b, _ := json.Marshal(writeRequest{Client: client, Token: token, Value: value, Call: call, Targets: targets})
	b = append(b, '\n')
	for attempt := 0; ; attempt++ {
		if rc.c == nil {
			c, err := net.DialTimeout("tcp", rc.addr, 5*time.Second)
			if err != nil {
				return writeReply{}, call, err
			}
			rc.c, rc.sc = c, bufio.NewScanner(c)
		}
		_ = rc.c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := rc.c.Write(b); err == nil && rc.sc.Scan() {
			var rep writeReply
			err := json.Unmarshal(rc.sc.Bytes(), &rep)
			return rep, call, err
		}
		_ = rc.c.Close()
		rc.c = nil
		if attempt > 0 {
			return writeReply{}, call, fmt.Errorf("resource at %s: connection lost", rc.addr)
		}
	}
}

func (rc *resourceClient) Close() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.c != nil {
		_ = rc.c.Close()
		rc.c = nil
	}
}
