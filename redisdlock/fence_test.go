package redisdlock_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// fenceRig starts a server of the test's own, so that it can count keys
// and commands.
func fenceRig(t *testing.T) (context.Context, *redis.Client) {
	t.Helper()
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return testCtx(t), rdb
}

func get(t *testing.T, ctx context.Context, rdb redis.Cmdable, key string) string {
	t.Helper()
	v, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// recordToken returns the token of f's record, "<none>" if there is none,
// and checks that the rest of the record is its write ids: "<token>
// <id> …", each id 32 hex digits, at most 8, all different.
func recordToken(t *testing.T, ctx context.Context, rdb redis.Cmdable, f *redisdlock.Fence) string {
	t.Helper()
	rec := get(t, ctx, rdb, f.Key())
	fields := strings.Split(rec, " ")
	ids := fields[1:]
	seen := map[string]bool{}
	for _, id := range ids {
		if _, err := hex.DecodeString(id); err != nil || len(id) != 32 || seen[id] {
			t.Fatalf("record %q: %q is not a new write id of 32 hex digits", rec, id)
		}
		seen[id] = true
	}
	if len(ids) > 8 {
		t.Fatalf("record %q: %d write ids, want at most 8", rec, len(ids))
	}
	return fields[0]
}

// wantStale checks that err is the refusal of token with recorded on record.
func wantStale(t *testing.T, err error, fence string, token, recorded uint64) {
	t.Helper()
	var se *dlock.StaleTokenError
	if !errors.Is(err, dlock.ErrStaleToken) || !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *dlock.StaleTokenError", err)
	}
	if *se != (dlock.StaleTokenError{Fence: fence, Token: token, Recorded: recorded}) {
		t.Fatalf("StaleTokenError = %+v, want fence %q, token %d, recorded %d", *se, fence, token, recorded)
	}
}

// The first write records its token; the same token writes again; a higher
// one writes and is recorded; a lower one is refused with the recorded
// token, and leaves the data and the record as they were. Each accepted
// write puts a new write id first in the record.
func TestFence_Set_tokenOrder(t *testing.T) {
	ctx, rdb := fenceRig(t)
	orders := redisdlock.NewFence(rdb, "orders")
	if orders.Key() != "dlock:fence:orders" || orders.Name() != "orders" {
		t.Fatalf("Key, Name = %q, %q", orders.Key(), orders.Name())
	}
	steps := []struct {
		token uint64
		value string
		stale bool
	}{
		{10, "a", false}, // first: records 10
		{10, "b", false}, // the same holder again
		{12, "c", false}, // a newer holder
		{11, "x", true},  // an older one, late
		{10, "y", true},
		{12, "d", false},
	}
	want, record, before := "<none>", uint64(0), "<none>"
	for _, s := range steps {
		err := orders.Set(ctx, s.token, "order:1", s.value, 0)
		after := get(t, ctx, rdb, orders.Key())
		if s.stale {
			wantStale(t, err, "orders", s.token, record)
			if after != before {
				t.Errorf("refused token %d changed the record from %q to %q", s.token, before, after)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%d, and %d is recorded", s.token, record)) {
				t.Errorf("message %q names neither token", err)
			}
		} else {
			if err != nil {
				t.Fatalf("Set with token %d: %v", s.token, err)
			}
			want, record = s.value, max(record, s.token)
			if ids := strings.Fields(after)[1:]; strings.Contains(before, ids[0]) || len(ids) > 1 && ids[1] != strings.Fields(before)[1] {
				t.Errorf("token %d: record %q after %q: want a new id first, then the previous ones", s.token, after, before)
			}
		}
		before = after
		if got := get(t, ctx, rdb, "order:1"); got != want {
			t.Fatalf("after token %d: data %q, want %q", s.token, got, want)
		}
		if got := recordToken(t, ctx, rdb, orders); got != strconv.FormatUint(record, 10) {
			t.Fatalf("after token %d: record %s, want %d", s.token, got, record)
		}
	}
	if ttl := rdb.PTTL(ctx, orders.Key()).Val(); ttl != -1 {
		t.Errorf("record's PTTL = %v, want none (-1)", ttl)
	}
}

// Set's ttl: an expiry, KEEPTTL, none.
func TestFence_Set_ttl(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "ttl")
	if err := f.Set(ctx, 1, "k", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "k").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("PTTL after Set with a minute = %v", ttl)
	}
	if err := f.Set(ctx, 1, "k", "v2", redis.KeepTTL); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "k").Val(); ttl <= 0 {
		t.Fatalf("PTTL after KeepTTL = %v, want the minute kept", ttl)
	}
	if err := f.Set(ctx, 1, "k", []byte("v3"), 0); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "k").Val(); ttl != -1 || get(t, ctx, rdb, "k") != "v3" {
		t.Fatalf("after Set with 0: PTTL %v, value %q; want no expiry, v3", ttl, get(t, ctx, rdb, "k"))
	}
}

func TestFence_HSet(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "h")
	if n, err := f.HSet(ctx, 5, "order:7", "state", "open", "by", "a"); err != nil || n != 2 {
		t.Fatalf("HSet pairs = %d, %v; want 2 added", n, err)
	}
	if n, err := f.HSet(ctx, 6, "order:7", map[string]any{"state": "closed", "at": 17}); err != nil || n != 1 {
		t.Fatalf("HSet map = %d, %v; want 1 added", n, err)
	}
	if n, err := f.HSet(ctx, 6, "order:7", map[string]string{"by": "b"}); err != nil || n != 0 {
		t.Fatalf("HSet map[string]string = %d, %v; want 0 added", n, err)
	}
	_, err := f.HSet(ctx, 5, "order:7", "state", "open", "late", "yes")
	wantStale(t, err, "h", 5, 6)
	got := rdb.HGetAll(ctx, "order:7").Val()
	if want := map[string]string{"state": "closed", "at": "17", "by": "b"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hash = %v, want %v", got, want)
	}
}

func TestFence_Del(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "d")
	rdb.MSet(ctx, "a", 1, "b", 2, "c", 3)
	if n, err := f.Del(ctx, 8, "a", "b", "nothing"); err != nil || n != 2 {
		t.Fatalf("Del = %d, %v; want 2", n, err)
	}
	_, err := f.Del(ctx, 7, "c")
	wantStale(t, err, "d", 7, 8)
	if get(t, ctx, rdb, "c") != "3" {
		t.Fatal("a refused Del deleted c")
	}
}

// Do runs single-key writes: INCRBY, LPUSH, HDEL (in any case), and
// returns their replies.
func TestFence_Do(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "do")
	if v, err := f.Do(ctx, 3, "INCRBY", "count", 5); err != nil || v != int64(5) {
		t.Fatalf("INCRBY = %v, %v", v, err)
	}
	if v, err := f.Do(ctx, 3, "lpush", "log", "x", "y"); err != nil || v != int64(2) {
		t.Fatalf("lpush = %v, %v", v, err)
	}
	rdb.HSet(ctx, "h", "f", 1, "g", 2)
	if v, err := f.Do(ctx, 4, "HDel", "h", "f"); err != nil || v != int64(1) {
		t.Fatalf("HDel = %v, %v", v, err)
	}
	if v, err := f.Do(ctx, 4, "LPOP", "nothing"); err != nil || v != nil {
		t.Fatalf("LPOP of no list = %v, %v; want nil", v, err)
	}
	_, err := f.Do(ctx, 3, "INCRBY", "count", 100)
	wantStale(t, err, "do", 3, 4)
	if get(t, ctx, rdb, "count") != "5" {
		t.Fatal("a refused INCRBY counted")
	}
}

// Bad input returns dlock.ErrInvalidFence naming the problem, and sends nothing:
// no key, no script run.
func TestFence_badInput_sendsNothing(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "jobs")
	many := make([]string, 5000)
	for i := range many {
		many[i] = "k" + strconv.Itoa(i)
	}
	cases := []struct {
		name, want string
		write      func() error
	}{
		{"empty name", "empty fence name", func() error { return redisdlock.NewFence(rdb, "").Set(ctx, 1, "k", "v", 0) }},
		{"token 0", "token 0", func() error { return f.Set(ctx, 0, "k", "v", 0) }},
		{"no key", "no key", func() error { _, err := f.Del(ctx, 1); return err }},
		{"empty key", "empty key", func() error { return f.Set(ctx, 1, "", "v", 0) }},
		{"the record", "fence's own record", func() error { _, err := f.Del(ctx, 1, "k", f.Key()); return err }},
		{"record by Do", "fence's own record", func() error { _, err := f.Do(ctx, 1, "INCR", f.Key()); return err }},
		{"record by Do's DEL", "fence's own record", func() error { _, err := f.Do(ctx, 1, "DEL", "k", f.Key()); return err }},
		{"another fence's record", "a fence's record", func() error { return f.Set(ctx, 1, redisdlock.FenceKeyPrefix+"other", "1", 0) }},
		{"negative ttl", "ttl -5s", func() error { return f.Set(ctx, 1, "k", "v", -5*time.Second) }},
		{"odd HSet", "3 values", func() error { _, err := f.HSet(ctx, 1, "h", "a", "b", "c"); return err }},
		{"no fields", "no field", func() error { _, err := f.HSet(ctx, 1, "h"); return err }},
		{"empty map", "no field", func() error { _, err := f.HSet(ctx, 1, "h", map[string]any{}); return err }},
		{"FLUSHALL", `"FLUSHALL" is not a command`, func() error { _, err := f.Do(ctx, 1, "FLUSHALL", "k"); return err }},
		{"RENAME", `"rename" is not a command`, func() error { _, err := f.Do(ctx, 1, "rename", "k", "other"); return err }},
		{"EVAL", `"EVAL" is not a command`, func() error { _, err := f.Do(ctx, 1, "EVAL", "return 1", 0); return err }},
		{"GET", `"GET" is not a command`, func() error { _, err := f.Do(ctx, 1, "GET", "k"); return err }},
		{"too many", "more than 4096", func() error { _, err := f.Del(ctx, 1, many...); return err }},
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		err := c.write()
		if !errors.Is(err, dlock.ErrInvalidFence) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want dlock.ErrInvalidFence saying %q", c.name, err, c.want)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("DBSIZE = %d after bad input, want 0 (keys %v)", n, rdb.Keys(ctx, "*").Val())
	}
	stats := commandStats(t, ctx, rdb)
	if stats["eval"]+stats["evalsha"] != 0 {
		t.Errorf("bad input ran scripts: %v", stats)
	}
}

// Tokens are compared as decimal strings, exactly: Lua's doubles would take
// 2^60+1 and 2^60 for equal and let the older write through.
func TestFence_tokensAbove2to53(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "big")
	if err := f.Set(ctx, 1<<60+1, "k", "newer", 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, 1<<60, "k", "older", 0), "big", 1<<60, 1<<60+1)
	wantStale(t, f.Set(ctx, 999, "k", "older", 0), "big", 999, 1<<60+1)
	if err := f.Set(ctx, math.MaxUint64, "k", "max", 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, math.MaxUint64-1, "k", "older", 0), "big", math.MaxUint64-1, math.MaxUint64)
	if got := get(t, ctx, rdb, "k"); got != "max" {
		t.Fatalf("data = %q, want max", got)
	}
}

// A command the server refuses after the compare (HSET on a string) fails
// with the server's error and leaves the data as it was. The token stays
// recorded (fence.lua records first): older writers are refused from then
// on, which is safe. Its write id does not (the record is "7", no id): it
// was not applied, so a retry of it is judged anew, not answered
// ErrReplyLost.
func TestFence_serverError_keepsData(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "wrongtype")
	rdb.Set(ctx, "k", "a string", 0)
	_, err := f.HSet(ctx, 7, "k", "field", "value")
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || errors.Is(err, dlock.ErrStaleToken) ||
		!strings.Contains(err.Error(), `fence "wrongtype": HSET "k"`) {
		t.Fatalf("HSet on a string: err = %v, want WRONGTYPE naming the fence and key", err)
	}
	if get(t, ctx, rdb, "k") != "a string" || get(t, ctx, rdb, f.Key()) != "7" {
		t.Fatalf("after WRONGTYPE: data %q, record %q", get(t, ctx, rdb, "k"), get(t, ctx, rdb, f.Key()))
	}

	// After an applied write, a failed one keeps that write's id, and only it.
	if err := f.Set(ctx, 7, "other", "v", 0); err != nil {
		t.Fatal(err)
	}
	applied := strings.Fields(get(t, ctx, rdb, f.Key()))[1]
	if _, err := f.HSet(ctx, 8, "k", "field", "value"); err == nil {
		t.Fatal("HSet on a string: no error")
	}
	if rec := get(t, ctx, rdb, f.Key()); rec != "8 "+applied {
		t.Fatalf("after an applied write and a WRONGTYPE: record %q, want %q", rec, "8 "+applied)
	}
}

// A record that is not a token and write ids (written by hand) fails every
// write, and none writes.
func TestFence_foreignRecord_refused(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "odd")
	for _, rec := range []string{"hello", "07", "7 ", "7 xyz", "7  ab", "-7", "7 ab\n"} {
		rdb.Set(ctx, f.Key(), rec, 0)
		err := f.Set(ctx, 5, "k", "v", 0)
		if err == nil || !strings.Contains(err.Error(), "not a token") {
			t.Fatalf("record %q: err = %v, want the record named as not a token", rec, err)
		}
		if get(t, ctx, rdb, "k") != "<none>" || get(t, ctx, rdb, f.Key()) != rec {
			t.Fatalf("record %q: written beside it", rec)
		}
	}
}

// The record holds the highest token, then the ids of the last 8 writes
// applied, newest first; a record of a token alone (as one set by hand to
// start a fence at a token) is read as one without ids.
func TestFence_record_writeIDs(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "ids")
	rdb.Set(ctx, f.Key(), "7", 0)
	wantStale(t, f.Set(ctx, 6, "k", "v", 0), "ids", 6, 7)
	var records []string
	for i := range 10 {
		tok := uint64(7) // the recorded token, then a newer one
		if i > 0 {
			tok = 8
		}
		if err := f.Set(ctx, tok, "k", strconv.Itoa(i), 0); err != nil {
			t.Fatal(err)
		}
		records = append(records, get(t, ctx, rdb, f.Key()))
		if got := recordToken(t, ctx, rdb, f); got != strconv.FormatUint(tok, 10) {
			t.Fatalf("write %d with token %d: record %q", i, tok, records[i])
		}
	}
	// Newest first: each record is a new id before the previous record's
	// ids, the ninth and later dropping the oldest.
	for i := 1; i < len(records); i++ {
		prev, cur := strings.Fields(records[i-1])[1:], strings.Fields(records[i])[1:]
		want := min(i+1, 8)
		if len(cur) != want || !slices.Equal(cur[1:], prev[:want-1]) {
			t.Fatalf("record after write %d: %q after %q: want a new id then the previous %d", i, records[i], records[i-1], want-1)
		}
	}
	wantStale(t, f.Set(ctx, 7, "k", "stale", 0), "ids", 7, 8)
	if got := get(t, ctx, rdb, f.Key()); got != records[len(records)-1] {
		t.Fatalf("a refused write changed the record: %q, was %q", got, records[len(records)-1])
	}
}

// An allkeys-* policy may evict the record (it has no expiry, so the
// volatile-* policies cannot): the record's first write fails with
// ErrUnsafeServer and writes nothing, unless AllowFenceEviction.
func TestFence_refusesEvictingServer(t *testing.T) {
	ctx, rdb := fenceRig(t)
	rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru")
	err := redisdlock.NewFence(rdb, "lru").Set(ctx, 1, "k", "v", 0)
	if !errors.Is(err, redisdlock.ErrUnsafeServer) || !strings.Contains(err.Error(), "allkeys-lru") ||
		!strings.Contains(err.Error(), "dlock:fence:lru") {
		t.Fatalf("err = %v, want ErrUnsafeServer naming the policy and the record", err)
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("DBSIZE = %d after the refusal, want 0", n)
	}
	if err := redisdlock.NewFence(rdb, "lru", redisdlock.AllowFenceEviction()).Set(ctx, 1, "k", "v", 0); err != nil {
		t.Fatalf("with AllowFenceEviction: %v", err)
	}
	rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-lru")
	if err := redisdlock.NewFence(rdb, "volatile").Set(ctx, 1, "k2", "v", 0); err != nil {
		t.Fatalf("volatile-lru: %v", err)
	}
}

// Writers with tokens taken in order write concurrently; every accepted
// write appends its token to a log in the same fenced script call, so the
// log is the server's order of accepted writes. It must never go down: a
// compare and a write that could interleave (GET, then SET from the client)
// would let an older token append after a newer one.
func TestFence_concurrentWriters_logInTokenOrder(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "{log}")
	var next atomic.Uint64
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				tok := next.Add(1)
				_, err := f.Do(ctx, tok, "RPUSH", "{log}:tokens", tok)
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, dlock.ErrStaleToken):
					refused.Add(1)
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	log := rdb.LRange(ctx, "{log}:tokens", 0, -1).Val()
	toks := make([]uint64, len(log))
	for i, s := range log {
		toks[i], _ = strconv.ParseUint(s, 10, 64)
	}
	if !slices.IsSorted(toks) || int64(len(toks)) != accepted.Load() {
		t.Fatalf("log of %d accepted writes (%d refused) out of token order: %v", accepted.Load(), refused.Load(), toks)
	}
	if rec := recordToken(t, ctx, rdb, f); rec != log[len(log)-1] {
		t.Fatalf("record %s, want the last logged token %s", rec, log[len(log)-1])
	}
	t.Logf("%d accepted, %d refused", accepted.Load(), refused.Load())
}

// Through Sentinel (a failover client), as on a single server.
func TestFence_sentinel(t *testing.T) {
	master, sentinel := testserver.StartRedisSentinel(t)
	ctx := testCtx(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel}})
	defer rdb.Close()
	f := redisdlock.NewFence(rdb, "sentinel")
	if err := f.Set(ctx, 9, "k", "newer", 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, 8, "k", "older", 0), "sentinel", 8, 9)
	direct := redis.NewClient(&redis.Options{Addr: master})
	defer direct.Close()
	if got := get(t, ctx, direct, "k"); got != "newer" {
		t.Fatalf("master holds %q, want newer", got)
	}
}

// A Ring shards by hash tag: keys with the record's tag work, others are
// refused before anything is sent.
func TestFence_ring(t *testing.T) {
	a, b := testserver.StartRedis(t), testserver.StartRedis(t)
	ctx := testCtx(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	defer ring.Close()
	f := redisdlock.NewFence(ring, "{orders}")
	if err := f.Set(ctx, 1, "{orders}:42", "closed", 0); err != nil {
		t.Fatal(err)
	}
	if got := get(t, ctx, ring, "{orders}:42"); got != "closed" {
		t.Fatalf("through the ring: %q", got)
	}
	err := f.Set(ctx, 2, "orders:43", "closed", 0)
	if !errors.Is(err, redisdlock.ErrCrossSlot) || !strings.Contains(err.Error(), `"{orders}:43"`) {
		t.Fatalf("other tag on a Ring: err = %v, want ErrCrossSlot with a hint", err)
	}
	if get(t, ctx, ring, "orders:43") != "<none>" || recordToken(t, ctx, ring, f) != "1" {
		t.Fatal("the refused write wrote")
	}
}

// Do's DEL and UNLINK take further keys after the first: those are keys
// too, checked as Del's are. Without that check, Do(token, "DEL", key,
// f.Key()) would run in the script and delete the fence's record, so that
// the next write of a stale holder would be taken as the fence's first;
// another fence's record would go the same way.
func TestFence_Do_delOfMoreKeys_areKeys(t *testing.T) {
	ctx, rdb := fenceRig(t)
	f := redisdlock.NewFence(rdb, "{del}")
	other := redisdlock.NewFence(rdb, "{del}:other")
	if err := f.Set(ctx, 5, "{del}:k", "B", 0); err != nil {
		t.Fatal(err)
	}
	if err := other.Set(ctx, 9, "{del}:o", "O", 0); err != nil {
		t.Fatal(err)
	}
	rec, otherRec := get(t, ctx, rdb, f.Key()), get(t, ctx, rdb, other.Key())
	for _, c := range []struct {
		cmd  string
		args []any
		want string
	}{
		{"DEL", []any{f.Key()}, "fence's own record"},
		{"unlink", []any{"{del}:x", f.Key()}, "fence's own record"},
		{"DEL", []any{other.Key()}, "a fence's record"},
		{"DEL", []any{[]byte("{del}:x")}, "not a string"},
	} {
		_, err := f.Do(ctx, 5, c.cmd, "{del}:k", c.args...)
		if !errors.Is(err, dlock.ErrInvalidFence) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Do(%s {del}:k %v): err = %v, want dlock.ErrInvalidFence saying %q", c.cmd, c.args, err, c.want)
		}
	}
	if got := get(t, ctx, rdb, f.Key()); got != rec || recordToken(t, ctx, rdb, f) != "5" {
		t.Fatalf("record after the refused DELs: %s, want %s (token 5)", got, rec)
	}
	if got := get(t, ctx, rdb, other.Key()); got != otherRec || recordToken(t, ctx, rdb, other) != "9" {
		t.Fatalf("the other fence's record after the refused DELs: %s, want %s (token 9)", got, otherRec)
	}
	wantStale(t, f.Set(ctx, 4, "{del}:k", "stale", 0), "{del}", 4, 5)
	if got := get(t, ctx, rdb, "{del}:k"); got != "B" {
		t.Fatalf("data %q, want B", got)
	}

	// Keys of its own are deleted, and counted, as by Del.
	rdb.MSet(ctx, "{del}:a", 1, "{del}:b", 2)
	if n, err := f.Do(ctx, 5, "UNLINK", "{del}:k", "{del}:a", "{del}:b", "{del}:none"); err != nil || n != int64(3) {
		t.Fatalf("UNLINK of 4 keys, 3 there = %v, %v; want 3", n, err)
	}
}

// Any write to a key under FenceKeyPrefix would change some fence's record
// (a fence writing another's, e.g. "{orders}" and "{orders}:b" share a
// Cluster slot): refused, not only writes to the fence's own record. A Set
// of token 1 to the other fence's record would make that fence take token
// 2 as newer than the 1 000 000 it had recorded.
func TestFence_otherFencesRecord_refused(t *testing.T) {
	ctx, rdb := fenceRig(t)
	a, b := redisdlock.NewFence(rdb, "{o}"), redisdlock.NewFence(rdb, "{o}:b")
	if err := b.Set(ctx, 1_000_000, "{o}:data", "B", 0); err != nil {
		t.Fatal(err)
	}
	err := a.Set(ctx, 1, b.Key(), "1", 0)
	if !errors.Is(err, dlock.ErrInvalidFence) || !strings.Contains(err.Error(), "a fence's record") {
		t.Errorf("Set of another fence's record: err = %v, want dlock.ErrInvalidFence", err)
	}
	wantStale(t, b.Set(ctx, 2, "{o}:data", "stale", 0), "{o}:b", 2, 1_000_000)
}
