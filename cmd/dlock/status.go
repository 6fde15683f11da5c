package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlockdev/dlock"
)

// readCmd is a parsed `dlock status` or `dlock leader`, whose flags (the
// backend's, --json, --watch) and argument (KEY) are the same, with the
// client it opened.
type readCmd struct {
	backend backendFlags
	asJSON  bool
	watch   bool
	key     string
	client  *dlock.Client
	stop    context.CancelFunc
}

// startRead parses the arguments of the command name and opens the
// backend. Under --watch the context it returns ends on SIGINT, SIGTERM or
// SIGHUP: that is a watch's normal end, and exits 0. A nil *readCmd says to
// exit with the code; else close it when done.
func (c *cli) startRead(ctx context.Context, name string, args []string) (context.Context, *readCmd, int) {
	f := newFlags(name)
	r := &readCmd{backend: addBackendFlags(f), stop: func() {}}
	asJSON := f.Bool("json", false, "")
	watch := f.Bool("watch", false, "")
	pos, code, ok := c.parse(f, args, 1)
	if !ok {
		return ctx, nil, code
	}
	if len(pos) == 0 {
		return ctx, nil, c.usageError(name, "missing KEY")
	}
	r.asJSON, r.watch, r.key = *asJSON, *watch, pos[0]
	if r.watch {
		ctx, r.stop = signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	}
	r.client, code, ok = c.open(ctx, r.backend)
	if !ok {
		r.stop()
		if r.watch && ctx.Err() != nil {
			return ctx, nil, exitOK
		}
		return ctx, nil, code
	}
	return ctx, r, exitOK
}

func (r *readCmd) close() {
	r.client.Close()
	r.stop()
}

func (c *cli) cmdStatus(ctx context.Context, args []string) int {
	ctx, r, code := c.startRead(ctx, "status", args)
	if r == nil {
		return code
	}
	defer r.close()
	// Read once, also with --watch: a bad key and an unreachable server
	// are reported as errors with their exit codes (Watch would only
	// close its channel, or wait).
	info, err := r.client.Inspect(ctx, r.key)
	if err != nil {
		if r.watch && ctx.Err() != nil {
			return exitOK
		}
		code, hints := c.explain(err, *r.backend.url)
		return c.fail(code, err, hints...)
	}
	if r.watch {
		if strings.HasPrefix(*r.backend.url, "redis") {
			fmt.Fprintln(c.stderr, "dlock: hint: Redis sends change notices for leader elections only, and none when a waiter joins or leaves: a lock's status is shown again only at its holder's deadline (docs/cli.md, dlock status --watch)")
		}
		return c.watchStatus(ctx, r.client, r.key, r.asJSON)
	}
	info = normalize(info)
	now := time.Now()
	if r.asJSON {
		return c.writeJSON(toJSON(info, now))
	}
	writeStatus(c.stdout, info, now)
	return exitOK
}

func (c *cli) cmdList(ctx context.Context, args []string) int {
	f := newFlags("ls")
	backend := addBackendFlags(f)
	asJSON := f.Bool("json", false, "")
	pos, code, ok := c.parse(f, args, 1)
	if !ok {
		return code
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	client, code, ok := c.open(ctx, backend)
	if !ok {
		return code
	}
	defer client.Close()
	infos, err := client.List(ctx, prefix)
	if err != nil {
		code, hints := c.explain(err, *backend.url)
		return c.fail(code, err, hints...)
	}
	for i, in := range infos {
		infos[i] = normalize(in)
	}
	now := time.Now()
	if *asJSON {
		out := make([]jsonLock, 0, len(infos))
		for _, in := range infos {
			out = append(out, toJSON(in, now))
		}
		return c.writeJSON(out)
	}
	if len(infos) == 0 {
		if prefix == "" {
			fmt.Fprintln(c.stdout, "no locks are held or waited for")
		} else {
			fmt.Fprintf(c.stdout, "no locks starting with %q are held or waited for\n", prefix)
		}
		return exitOK
	}
	writeList(c.stdout, infos, now)
	return exitOK
}

func (c *cli) writeJSON(v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(exitFailure, err)
	}
	return exitOK
}

// describeHolder says who holds key and how many wait, for error messages;
// "" if that cannot be found out quickly.
func (c *cli) describeHolder(client *dlock.Client, key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	in, err := client.Inspect(ctx, key)
	if err != nil || len(in.Holders) == 0 {
		return ""
	}
	return describeHolders(normalize(in), time.Now())
}

// who names a holder or waiter: "host pid 1234".
func who(m dlock.Metadata) string {
	var parts []string
	if m.Host != "" {
		parts = append(parts, m.Host)
	}
	if m.PID != 0 {
		parts = append(parts, "pid "+strconv.Itoa(m.PID))
	}
	if len(parts) == 0 {
		return "an unnamed client"
	}
	return strings.Join(parts, " ")
}

func fmtSince(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	layout := "15:04:05"
	if t.Local().YearDay() != now.Local().YearDay() || t.Year() != now.Year() {
		layout = "2006-01-02 15:04:05"
	}
	return fmt.Sprintf("%s (%s ago)", t.Local().Format(layout), fmtDuration(now.Sub(t)))
}

func fmtTTL(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmtDuration(d)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
