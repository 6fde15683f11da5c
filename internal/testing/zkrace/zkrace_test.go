package zkrace

import (
	"os"
	"path/filepath"
	"testing"
)

// Others drops only go-zookeeper's lastZxid race (a report as the race
// detector printed it), and keeps any other.
func TestOthers(t *testing.T) {
	upstream, ours := read(t, "upstream.txt"), read(t, "ours.txt")
	if got := Others(upstream); len(got) != 0 {
		t.Errorf("the upstream race was kept: %q", got)
	}
	if got := Others(upstream + ours + upstream); len(got) != 1 {
		t.Errorf("kept %d reports of upstream+ours+upstream, want 1 (ours)", len(got))
	}
	if got := Others("plain stderr, no race"); len(got) != 0 {
		t.Errorf("kept %q from stderr without a race", got)
	}
}

// read returns a race report from testdata: as the race detector printed
// go-zookeeper's known race, or one of another place.
func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
