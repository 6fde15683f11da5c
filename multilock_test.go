package dlock

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestClient_LockAll_inputMessages pins the messages of the input LockAll
// refuses before it talks to the server (so no driver is needed: the
// Client's is nil, and would crash if used). The behaviour on a server is
// the conformance suite's (dlocktest, MultiLock_*).
func TestClient_LockAll_inputMessages(t *testing.T) {
	c, err := NewClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		keys []string
		opts []LockOption
		want string
	}{
		{nil, nil, `lockall: dlock: invalid key: no keys given`},
		{[]string{"b", "a", "b"}, nil, `lockall "b": dlock: invalid key: given twice, at positions 0 and 2 of the list (locks are not reentrant)`},
		{[]string{"a", "a\tb"}, nil, `lockall "a\tb": dlock: invalid key: control character U+0009 at byte 1`},
		{[]string{"a", "b", "c", "d", "e"}, []LockOption{WithTTL(time.Millisecond)}, `lockall ["a" "b" "c" "d" … (5 keys)]: dlock: invalid option: TTL 1ms is outside [100ms, 24h0m0s]`},
	} {
		for name, call := range map[string]func(context.Context, []string, ...LockOption) (*MultiLease, error){"LockAll": c.LockAll, "TryLockAll": c.TryLockAll} {
			m, err := call(ctx, tc.keys, tc.opts...)
			if m != nil || err == nil || err.Error() != tc.want {
				t.Errorf("%s(%q): %v, %v\nwant %s", name, tc.keys, m, err, tc.want)
			}
		}
	}
	if got := quoteList([]string{strings.Repeat("k", MaxKeyLen+1)}); !strings.HasSuffix(got, `…"]`) {
		t.Errorf("quoteList of a key too long = %s, want it cut", got)
	}
}
