package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
)

func (c *cli) cmdLeader(ctx context.Context, args []string) int {
	ctx, r, code := c.startRead(ctx, "leader", args)
	if r == nil {
		return code
	}
	defer r.close()
	el := r.client.Election(r.key)
	// Read once, also with --watch: a bad key, a key of another kind and
	// an unreachable server are reported as errors with their exit codes
	// (Observe would only close its channel, or wait).
	info, err := el.Leader(ctx)
	switch {
	case err == nil, errors.Is(err, dlock.ErrNoLeader):
	case r.watch && ctx.Err() != nil:
		return exitOK
	case errors.Is(err, dlock.ErrKindMismatch):
		return c.fail(exitKindMismatch, err, c.electionKindHint(r.client, r.key))
	default:
		code, hints := c.explain(err, *r.backend.url)
		return c.fail(code, err, hints...)
	}
	if !r.watch {
		now := time.Now()
		if r.asJSON {
			if code := c.writeJSON(leaderJSON(r.key, info)); code != exitOK {
				return code
			}
		} else {
			fmt.Fprintln(c.stdout, leaderLine(r.key, info, now))
		}
		if !info.HasLeader() {
			return exitNoLeader
		}
		return exitOK
	}
	return c.watchLeader(ctx, el, r.asJSON)
}

// watchLeader prints the election's state, then every change, one line
// each, until ctx ends (SIGINT, SIGTERM, SIGHUP): then it exits 0.
func (c *cli) watchLeader(ctx context.Context, el *dlock.Election, asJSON bool) int {
	enc := json.NewEncoder(c.stdout) // one object per line
	for info := range el.Observe(ctx) {
		if asJSON {
			if err := enc.Encode(leaderJSON(el.Key(), info)); err != nil {
				return c.fail(exitFailure, err)
			}
			continue
		}
		if _, err := fmt.Fprintln(c.stdout, leaderLine(el.Key(), info, time.Now())); err != nil {
			return exitFailure // stdout closed (the reader of a pipe left): nothing to report to
		}
	}
	if ctx.Err() != nil {
		return exitOK
	}
	// Observe closes its channel at once, with ctx still alive, when the
	// driver cannot watch: the key's validity was checked above.
	return c.fail(exitFailure, fmt.Errorf("cannot watch the election %q: %w", el.Key(), errors.ErrUnsupported),
		"this backend sends no change notices; run `dlock leader "+el.Key()+"` without --watch to read the leader once")
}

// leaderLine is the state of an election as one line: `KEY: led by HOST
// pid PID since 14:02:11 (2m3s ago), token 1187, value "V"`, or `KEY: no
// leader`.
func leaderLine(key string, info dlock.LeaderInfo, now time.Time) string {
	if !info.HasLeader() {
		return key + ": no leader"
	}
	var b strings.Builder
	b.WriteString(key + ": led by " + who(info.Metadata))
	if !info.Since.IsZero() {
		b.WriteString(" since " + fmtSince(info.Since, now))
	}
	b.WriteString(", token " + strconv.FormatUint(info.Token, 10))
	if info.Value != "" {
		b.WriteString(", value " + strconv.Quote(info.Value))
	}
	return b.String()
}

// jsonElection is the --json form of an election; docs/cli.md documents
// it.
type jsonElection struct {
	Key    string      `json:"key"`
	Leader *jsonLeader `json:"leader"` // null when nobody leads
}

type jsonLeader struct {
	Value string     `json:"value"`
	Token uint64     `json:"token"`
	Since *time.Time `json:"since,omitempty"` // omitted when the backend cannot tell
	Host  string     `json:"host,omitempty"`
	PID   int        `json:"pid,omitempty"`
	Note  string     `json:"note,omitempty"`
}

func leaderJSON(key string, info dlock.LeaderInfo) jsonElection {
	out := jsonElection{Key: key}
	if !info.HasLeader() {
		return out
	}
	l := &jsonLeader{Value: info.Value, Token: info.Token, Host: info.Metadata.Host, PID: info.Metadata.PID, Note: info.Metadata.Note}
	if !info.Since.IsZero() {
		s := info.Since
		l.Since = &s
	}
	out.Leader = l
	return out
}
