package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

// record is one slog record as a handler saw it.
type record struct {
	level slog.Level
	msg   string
	attrs map[string]string
	span  any // the context's ctxKey("span") value
}

// recordHandler keeps every record, at every level.
type recordHandler struct {
	mu      *sync.Mutex
	records *[]record
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recordHandler) WithGroup(string) slog.Handler            { return h }
func (h recordHandler) Handle(ctx context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message, attrs: map[string]string{}, span: ctx.Value(ctxKey("span"))}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, rec)
	return nil
}

// TestHooks_logRecords: with WithLogger, every event is a record at its
// level with its fields, made with the context the other hooks returned
// (so that a handler can correlate it with a trace).
func TestHooks_logRecords(t *testing.T) {
	var mu sync.Mutex
	var records []record
	find := func(msg string) (record, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range records {
			if r.msg == msg {
				return r, true
			}
		}
		return record{}, false
	}
	r := newRecorder()
	span := dlock.Hooks{AcquireStart: func(ctx context.Context, _ dlock.AcquireStartInfo) context.Context {
		return context.WithValue(ctx, ctxKey("span"), "s1")
	}}
	// The logger is given first, and still comes after the hooks.
	// On a fake clock the space never drops the lease of a live client:
	// it ends only when the Client finds it not renewed in time.
	c, h, err := memdlock.New(&memdlock.Options{Clock: memdlock.NewClock(time.Now())}, dlock.WithLogger(slog.New(recordHandler{&mu, &records})), dlock.WithHooks(span), dlock.WithHooks(r.hooks()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	l, err := c.Lock(ctx, "logged", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, func(i dlock.RenewedInfo) bool { return i.Err == nil })
	h.Freeze()
	waitFor(t, r, func(i dlock.RenewedInfo) bool { return i.Err != nil })
	h.Thaw()
	if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	waitFor[dlock.LeaseEndedInfo](t, r, nil)
	_ = c.Do(ctx, "lost", func(ctx context.Context) error {
		h.LoseLease("lost")
		<-ctx.Done()
		return nil
	})
	if _, err := c.TryLock(ctx, ""); err == nil {
		t.Fatal("TryLock of an empty key succeeded")
	}

	token := func(l *dlock.Lease) string { return slog.Uint64Value(l.Token()).String() }
	for _, want := range []struct {
		msg   string
		level slog.Level
		attrs map[string]string
	}{
		{"dlock: acquiring", slog.LevelDebug, map[string]string{"key": "logged", "kind": "lock", "mode": "exclusive"}},
		{"dlock: acquire done", slog.LevelDebug, map[string]string{"key": "logged", "outcome": "acquired", "token": token(l), "waited": ""}},
		{"dlock: lease renewed", slog.LevelDebug, map[string]string{"key": "logged", "token": token(l), "latency": "", "late": ""}},
		{"dlock: lease renewal failed", slog.LevelWarn, map[string]string{"key": "logged", "error": ""}},
		{"dlock: lease lost", slog.LevelWarn, map[string]string{"key": "lost", "reason": "dropped", "held": "", "error": ""}},
		{"dlock: job ran on after its lease ended", slog.LevelError, map[string]string{"key": "lost", "reason": "dropped", "unprotected": ""}},
	} {
		got, ok := find(want.msg)
		if !ok {
			t.Errorf("no record %q", want.msg)
			continue
		}
		if got.level != want.level || got.span != "s1" {
			t.Errorf("%q at %v with span %v, want %v with the hooks' context", want.msg, got.level, got.span, want.level)
		}
		for k, v := range want.attrs {
			if g, ok := got.attrs[k]; !ok || (v != "" && g != v) {
				t.Errorf("%q: %s=%q, want %q (%v)", want.msg, k, g, v, got.attrs)
			}
		}
	}
	// The first lease ends released or, if it expired while frozen, lost.
	mu.Lock()
	defer mu.Unlock()
	ends := 0
	for _, rec := range records {
		if rec.attrs["key"] == "logged" && (rec.msg == "dlock: lease ended" || rec.msg == "dlock: lease lost") {
			ends++
		}
		if rec.msg == "dlock: acquire done" && rec.attrs["key"] == "" && (rec.attrs["outcome"] != "error" || rec.attrs["error"] == "") {
			t.Errorf("bad input: %+v, want outcome error with the error", rec)
		}
	}
	if ends != 1 {
		t.Errorf("%d end records for the first lease, want 1", ends)
	}
}
