package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/dlockdev/dlock/gateway"
)

// The gateway section: the contended run of the library used directly,
// then the same run with the contenders as HTTP clients of a gateway
// (package gateway) served in this process on loopback over one Client of
// the same backend, each waiting with long polls. Both in one run, one
// after the other, on each of dlock's backends.

// gatewayContenders is how many contenders each run of the section has.
const gatewayContenders = 8

// gatewayResult is one run of the gateway section.
type gatewayResult struct {
	Backend string
	// Path is "library" (each contender its own dlock.Client) or
	// "gateway" (each its own HTTP connection to one gateway).
	Path string
	contendedResult
}

func runGatewaySection(s *servers, libs []*library, cfg config) []gatewayResult {
	var out []gatewayResult
	for _, lib := range libs {
		if !lib.IsDlock || lib.Missing != "" {
			continue
		}
		for _, path := range []string{"library", "gateway"} {
			r := runGatewayPath(s, lib, path, cfg)
			log.Printf("gateway %-18s %-7s n=%d grants/s %.0f hand-off p50 %v p99 %v overlaps %d errors %d %s",
				lib.Name, path, r.N, r.GrantsPerS, r.HandoffP50, r.HandoffP99, r.Overlaps, r.Errors, r.FirstErr)
			out = append(out, r)
		}
	}
	return out
}

// runGatewayPath runs gatewayContenders contenders of lib, directly or
// through a gateway, on a fresh key.
func runGatewayPath(s *servers, lib *library, path string, cfg config) gatewayResult {
	res := gatewayResult{Backend: lib.Backend, Path: path}
	key := "gateway-" + path // fresh: a cut run can leave a lock behind
	var cs []contender
	var err error
	start := time.Now()
	if path == "library" {
		cs, err = newContenders(s, lib, gatewayContenders, key)
	} else {
		var stop func()
		cs, stop, err = newGatewayContenders(s, lib, gatewayContenders, key)
		if err == nil {
			defer stop()
		}
	}
	if err != nil {
		res.contendedResult = contendedResult{Lib: lib.Name, N: gatewayContenders, FirstErr: err.Error(), Errors: 1}
		return res
	}
	setup := time.Since(start)
	res.contendedResult = runContended(s, lib, cs, false, cfg.warmup, cfg.window)
	res.Setup = setup
	for _, c := range cs {
		c.Close()
	}
	return res
}

// newGatewayContenders serves a gateway over a Client of lib's backend (the
// Client of one of lib's own contenders) on a loopback port, and returns n
// contenders that are its HTTP clients, and the function that stops it.
func newGatewayContenders(s *servers, lib *library, n int, key string) ([]contender, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := lib.newContender(ctx, s.env, key)
	if err != nil {
		return nil, nil, err
	}
	dc, ok := holder.(*dlockContender)
	if !ok {
		holder.Close()
		return nil, nil, fmt.Errorf("%s: not a dlock client", lib.Name)
	}
	gw, err := gateway.New(dc.c)
	if err != nil {
		holder.Close()
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		holder.Close()
		return nil, nil, err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = gw.Close(sctx)
		_ = srv.Close()
		holder.Close()
	}
	cs := make([]contender, n)
	for i := range cs {
		// A transport each: each contender has a connection of its own,
		// as each of the library's has a Client of its own.
		cs[i] = &gatewayContender{base: "http://" + ln.Addr().String(), key: key,
			http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}}
	}
	return cs, stop, nil
}

// gatewayContender takes the key through the gateway: a long poll that
// keeps its ticket from poll to poll, and a release by lease id.
type gatewayContender struct {
	base, key string
	http      *http.Client
	leaseID   string
}

// gatewayReply is the part of the gateway's replies the contender reads.
type gatewayReply struct {
	LeaseID string `json:"lease_id"`
	Ticket  string `json:"ticket"`
	Error   *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (g *gatewayContender) Lock(ctx context.Context) error {
	body := map[string]any{"key": g.key, "wait_ms": 30000}
	for {
		status, r, err := g.call(ctx, http.MethodPost, "/v1/acquire", body)
		switch {
		case err != nil:
			return err
		case status == http.StatusOK:
			g.leaseID = r.LeaseID
			return nil
		case status == http.StatusAccepted:
			body["ticket"] = r.Ticket // the next poll keeps the place
		default:
			return fmt.Errorf("acquire: %d %+v", status, r.Error)
		}
	}
}

func (g *gatewayContender) Unlock(ctx context.Context) error {
	id := g.leaseID
	g.leaseID = ""
	if id == "" {
		return errors.New("not held")
	}
	status, r, err := g.call(ctx, http.MethodDelete, "/v1/leases/"+id, nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("release: %d %+v", status, r.Error)
	}
	return err
}

func (g *gatewayContender) Close() { g.http.CloseIdleConnections() }

func (g *gatewayContender) call(ctx context.Context, method, path string, body any) (int, gatewayReply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, gatewayReply{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, rd)
	if err != nil {
		return 0, gatewayReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.http.Do(req)
	if err != nil {
		return 0, gatewayReply{}, err
	}
	defer resp.Body.Close()
	var r gatewayReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return resp.StatusCode, r, fmt.Errorf("%s %s: reply: %w", method, path, err)
	}
	return resp.StatusCode, r, nil
}
