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

func (c *cli) cmdStatus(ctx context.Context, args []string) int {
	f := newFlags("status")
	backend := addBackendFlags(f)
	asJSON := f.Bool("json", false, "")
	watch := f.Bool("watch", false, "")
	pos, code, ok := c.parse(f, args, 1)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return c.usageError("status", "missing KEY")
	}
	if *watch {
		// A watch runs until it is interrupted: that is its normal end.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		defer stop()
	}
	client, code, ok := c.open(ctx, backend)
	if !ok {
		if *watch && ctx.Err() != nil {
			return exitOK
		}
		return code
	}
	defer client.Close()
	// Read once, also with --watch: a bad key and an unreachable server
	// are reported as errors with their exit codes (Watch would only
	// close its channel, or wait).
	info, err := client.Inspect(ctx, pos[0])
	if err != nil {
		if *watch && ctx.Err() != nil {
			return exitOK
		}
		code, hints := c.explain(err, *backend.url)
		return c.fail(code, err, hints...)
	}
	if *watch {
		if strings.HasPrefix(*backend.url, "redis") {
			fmt.Fprintln(c.stderr, "dlock: hint: Redis sends change notices for leader elections only, and none when a waiter joins or leaves: a lock's status is shown again only at its holder's deadline (docs/cli.md, dlock status --watch)")
		}
		return c.watchStatus(ctx, client, pos[0], *asJSON)
	}
	info = normalize(info)
	now := time.Now()
	if *asJSON {
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
