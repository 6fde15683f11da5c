// Package errtext pins the text of the errors dlock shows its users. Each
// backend has a golden test that provokes every kind of error against a real
// server, records the messages with a Recorder, which replaces what varies
// from run to run (addresses, durations, tokens, temporary paths), and
// compares them with testdata/errors.golden. After a deliberate change of
// wording, rewrite the file and review the diff:
//
//	go test -run TestErrorMessages -update
//
// The rule the messages follow is in driver/errors.go.
//
// It is internal, not part of dlocktest, because the normalization is only
// good enough for dlock's own messages and is no API to keep stable.
package errtext

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
)

var update = flag.Bool("update", false, "rewrite testdata/errors.golden with the messages the test sees")

// sentinels are the errors a golden line lists when a message satisfies
// them (errors.Is), so that the file pins the kind of each error too.
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrLocked", dlock.ErrLocked},
	{"ErrNotHeld", dlock.ErrNotHeld},
	{"ErrLeaseLost", dlock.ErrLeaseLost},
	{"ErrReleased", dlock.ErrReleased},
	{"ErrClosed", dlock.ErrClosed},
	{"ErrKindMismatch", dlock.ErrKindMismatch},
	{"ErrInvalidKey", dlock.ErrInvalidKey},
	{"ErrInvalidOption", dlock.ErrInvalidOption},
	{"ErrInvalidURL", dlock.ErrInvalidURL},
	{"ErrUnavailable", dlock.ErrUnavailable},
	{"ErrAuth", dlock.ErrAuth},
	{"context.Canceled", context.Canceled},
	{"context.DeadlineExceeded", context.DeadlineExceeded},
}

// Recorder collects the messages of one golden test.
type Recorder struct {
	t       *testing.T
	replace *strings.Replacer
	names   map[string]bool
	lines   []string
	secrets []string
}

// New returns a Recorder. replace lists pairs of old and new strings that
// Normalize replaces first, for variable parts only the test knows (a root
// node with a unique name, say).
func New(t *testing.T, replace ...string) *Recorder {
	return &Recorder{t: t, replace: strings.NewReplacer(replace...), names: map[string]bool{}}
}

// Forbid makes Record fail the test when a message contains secret (a
// password given in a URL).
func (r *Recorder) Forbid(secret string) { r.secrets = append(r.secrets, secret) }

// Record adds err's message under name. It fails the test unless err
// satisfies errors.Is(err, want) for each want, so that a golden line can
// only record the intended kind of error.
func (r *Recorder) Record(name string, err error, want ...error) {
	r.t.Helper()
	if r.names[name] {
		r.t.Fatalf("errtext: %s recorded twice", name)
	}
	r.names[name] = true
	if err == nil {
		r.t.Errorf("%s: no error, want %v", name, want)
		r.lines = append(r.lines, name+": <nil>")
		return
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			r.t.Errorf("%s: %v does not satisfy errors.Is with %v", name, err, w)
		}
	}
	for _, s := range r.secrets {
		if strings.Contains(err.Error(), s) {
			r.t.Errorf("%s: the message shows the secret %q: %v", name, s, err)
		}
	}
	var kinds []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			kinds = append(kinds, s.name)
		}
	}
	msg := r.Normalize(err.Error())
	msg = strings.ReplaceAll(msg, "\n", `\n`)
	r.lines = append(r.lines, fmt.Sprintf("%s [%s]: %s", name, strings.Join(kinds, " "), msg))
}

// Check compares the recorded lines with testdata/errors.golden, or writes
// them there under -update.
func (r *Recorder) Check() {
	r.t.Helper()
	path := filepath.Join("testdata", "errors.golden")
	got := strings.Join(r.lines, "\n") + "\n"
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(header+got), 0o644); err != nil {
			r.t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatalf("%v (create it with go test -run %s -update)", err, r.t.Name())
	}
	want := strings.TrimPrefix(string(b), header)
	if got == want {
		return
	}
	wantLines := strings.Split(strings.TrimSuffix(want, "\n"), "\n")
	gotLines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	for i := 0; i < max(len(wantLines), len(gotLines)); i++ {
		var w, g string
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if w != g {
			r.t.Errorf("%s line %d:\n got: %s\nwant: %s", path, i+1+strings.Count(header, "\n"), g, w)
		}
	}
	r.t.Errorf("error messages differ from %s; if the change is deliberate, run go test -run %s -update and review the diff", path, r.t.Name())
}

const header = "# Error messages as users see them (internal/testing/errtext). Each line is\n" +
	"# name [sentinels the error satisfies]: message. Regenerate with -update.\n"

var (
	// Loopback addresses with a port: the test servers' free ports.
	addrRE = regexp.MustCompile(`(?:127\.0\.0\.1|\[::1\]|localhost):\d+`)
	// Durations as time.Duration prints them: 1.5s, 300ms, 1m0s, 24h0m0s.
	durationRE = regexp.MustCompile(`(?:^|\b|-)(?:\d+(?:\.\d+)?(?:h|m|s|ms|µs|us|ns))+\b`)
	// Session ids (0x…), owner ids, lease ids, sequence numbers, tokens:
	// hexadecimal runs of eight or more, decimal runs of five or more.
	hexRE = regexp.MustCompile(`\b(?:0x[0-9a-f]+|[0-9a-f]{8,}|\d{5,})\b`)
	// etcd revisions, which depend on what ran before.
	revisionRE = regexp.MustCompile(`\brevision \d+`)
)

// Normalize replaces the parts of msg that vary between runs: first the
// Recorder's own pairs, then the temporary directory, loopback addresses
// (ADDR), durations (DUR), ids and tokens (N).
func (r *Recorder) Normalize(msg string) string {
	msg = r.replace.Replace(msg)
	if tmp := os.TempDir(); len(tmp) > 1 {
		msg = regexp.MustCompile(regexp.QuoteMeta(tmp)+`/[^\s"':,)]*`).ReplaceAllString(msg, "TMP")
	}
	msg = addrRE.ReplaceAllString(msg, "ADDR")
	msg = durationRE.ReplaceAllStringFunc(msg, func(s string) string {
		if strings.HasPrefix(s, "-") {
			return "-DUR"
		}
		return "DUR"
	})
	msg = revisionRE.ReplaceAllString(msg, "revision N")
	msg = hexRE.ReplaceAllString(msg, "N")
	return msg
}

// RecordOpen opens each URL of the {name, URL} pairs, in order, and records
// its error under its name; every one must fail with want.
func (r *Recorder) RecordOpen(ctx context.Context, want error, urls [][2]string) {
	for _, u := range urls {
		_, err := dlock.Open(ctx, u[1])
		r.Record(u[0], err, want)
	}
}
