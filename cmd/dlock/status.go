package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlockdev/dlock"
)

func (c *cli) cmdStatus(ctx context.Context, args []string) int {
	f := newFlags("status")
	backend := addBackendFlags(f)
	asJSON := f.Bool("json", false, "")
	pos, code, ok := c.parse(f, args, 1)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return c.usageError("status", "missing KEY")
	}
	client, code, ok := c.open(ctx, backend)
	if !ok {
		return code
	}
	defer client.Close()
	info, err := client.Inspect(ctx, pos[0])
	if err != nil {
		code, hints := c.explain(err, *backend.url)
		return c.fail(code, err, hints...)
	}
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
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHOLDER\tTOKEN\tHELD SINCE\tTTL LEFT\tWAITERS\tNOTE")
	for _, in := range infos {
		holder, token, since, ttl, note := "-", "-", "-", "-", ""
		if h := firstHolder(in); h != nil {
			holder = who(h.Metadata)
			token = strconv.FormatUint(h.Token, 10)
			since = fmtSince(h.Since, now)
			ttl = fmtTTL(h.TTL)
			note = h.Metadata.Note
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", in.Key, holder, token, since, ttl, len(in.Waiters), note)
	}
	_ = tw.Flush()
	return exitOK
}

// writeStatus prints one key's holder and waiters for people.
func writeStatus(w io.Writer, in *dlock.LockInfo, now time.Time) {
	if firstHolder(in) == nil && len(in.Waiters) == 0 {
		fmt.Fprintf(w, "%s: free (nobody holds it or waits for it)\n", in.Key)
		return
	}
	switch {
	case firstHolder(in) == nil:
		fmt.Fprintf(w, "%s: free, with %d waiting to take it\n", in.Key, len(in.Waiters))
	case len(in.Waiters) == 0:
		fmt.Fprintf(w, "%s: held by %s, nobody waiting\n", in.Key, who(firstHolder(in).Metadata))
	default:
		fmt.Fprintf(w, "%s: held by %s, %d waiting\n", in.Key, who(firstHolder(in).Metadata), len(in.Waiters))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tHOST\tPID\tTOKEN\tSINCE\tTTL LEFT\tNOTE")
	row := func(role string, e dlock.Entry, token string) {
		pid := "-"
		if e.Metadata.PID != 0 {
			pid = strconv.Itoa(e.Metadata.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", role, orDash(e.Metadata.Host), pid, token, fmtSince(e.Since, now), fmtTTL(e.TTL), e.Metadata.Note)
	}
	if h := firstHolder(in); h != nil {
		row("holder", *h, strconv.FormatUint(h.Token, 10))
	}
	for i, e := range in.Waiters {
		row("waiter "+strconv.Itoa(i+1), e, "-")
	}
	_ = tw.Flush()
}

// firstHolder returns the first of in's holders, nil when there is none.
func firstHolder(in *dlock.LockInfo) *dlock.Entry {
	if len(in.Holders) == 0 {
		return nil
	}
	return &in.Holders[0]
}

// jsonLock is the --json form of one key; docs/cli.md documents it.
type jsonLock struct {
	Key     string      `json:"key"`
	Holder  *jsonEntry  `json:"holder"`  // null when free
	Waiters []jsonEntry `json:"waiters"` // in the order they will be served
}

type jsonEntry struct {
	Token     uint64     `json:"token,omitempty"` // holder only
	Host      string     `json:"host,omitempty"`
	PID       int        `json:"pid,omitempty"`
	Note      string     `json:"note,omitempty"`
	Since     *time.Time `json:"since,omitempty"`       // omitted when the backend cannot tell
	TTLLeftMS *int64     `json:"ttl_left_ms,omitempty"` // omitted when the backend cannot tell
}

func toJSON(in *dlock.LockInfo, now time.Time) jsonLock {
	conv := func(e dlock.Entry) jsonEntry {
		j := jsonEntry{Token: e.Token, Host: e.Metadata.Host, PID: e.Metadata.PID, Note: e.Metadata.Note}
		if !e.Since.IsZero() {
			s := e.Since
			j.Since = &s
		}
		if e.TTL >= 0 {
			ms := e.TTL.Milliseconds()
			j.TTLLeftMS = &ms
		}
		return j
	}
	out := jsonLock{Key: in.Key, Waiters: []jsonEntry{}}
	if firstHolder(in) != nil {
		h := conv(*firstHolder(in))
		out.Holder = &h
	}
	for _, w := range in.Waiters {
		out.Waiters = append(out.Waiters, conv(w))
	}
	return out
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
	if err != nil || firstHolder(in) == nil {
		return ""
	}
	h := firstHolder(in)
	s := "held by " + who(h.Metadata)
	if h.Metadata.Note != "" {
		s += " running " + strconv.Quote(h.Metadata.Note)
	}
	if !h.Since.IsZero() {
		s += " for " + fmtDuration(time.Since(h.Since))
	}
	s += fmt.Sprintf(" (token %d)", h.Token)
	if n := len(in.Waiters); n > 0 {
		s += fmt.Sprintf(", %d waiting", n)
	}
	return s
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
