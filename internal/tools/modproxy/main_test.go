package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFiles writes name → content under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// zipNames lists the file names in a module zip.
func zipNames(t *testing.T, path string) []string {
	t.Helper()
	r, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	for _, f := range r.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	return names
}

func TestPublish_modulesAsCommitted(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		".gitignore":       "/built\n",
		"go.mod":           "module example.com/r\n\ngo 1.26.0\n",
		"r.go":             "package r\n",
		"built":            "an ignored build output",
		"sub/go.mod":       "module example.com/r/sub\n\ngo 1.26.0\n\nrequire example.com/r v1.2.3\n",
		"sub/s.go":         "package sub\n",
		"sub/untracked.go": "package sub\n",
		"gone.go":          "package r\n",
	})
	git(t, repo, "init", "-q")
	git(t, repo, "add", ".gitignore", "go.mod", "r.go", "sub/go.mod", "sub/s.go", "gone.go")
	if err := os.Remove(filepath.Join(repo, "gone.go")); err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	if err := publish(repo, "v1.2.3", out, []string{".", "sub"}); err != nil {
		t.Fatal(err)
	}
	// Published twice, the version is listed once.
	if err := publish(repo, "v1.2.3", out, []string{"."}); err != nil {
		t.Fatal(err)
	}

	root := filepath.Join(out, "example.com", "r", "@v")
	if got, want := zipNames(t, filepath.Join(root, "v1.2.3.zip")), []string{
		"example.com/r@v1.2.3/.gitignore",
		"example.com/r@v1.2.3/go.mod",
		"example.com/r@v1.2.3/r.go",
	}; !slices.Equal(got, want) {
		t.Errorf("root module's zip holds %q, want %q (no ignored, deleted or nested module's file)", got, want)
	}
	sub := filepath.Join(out, "example.com", "r", "sub", "@v")
	if got, want := zipNames(t, filepath.Join(sub, "v1.2.3.zip")), []string{
		"example.com/r/sub@v1.2.3/go.mod",
		"example.com/r/sub@v1.2.3/s.go",
		"example.com/r/sub@v1.2.3/untracked.go",
	}; !slices.Equal(got, want) {
		t.Errorf("sub module's zip holds %q, want %q", got, want)
	}
	mod, err := os.ReadFile(filepath.Join(sub, "v1.2.3.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "require example.com/r v1.2.3") {
		t.Errorf("sub's .mod is not its go.mod:\n%s", mod)
	}
	list, err := os.ReadFile(filepath.Join(root, "list"))
	if err != nil {
		t.Fatal(err)
	}
	if string(list) != "v1.2.3\n" {
		t.Errorf("list = %q, want %q", list, "v1.2.3\n")
	}
	if _, err := os.Stat(filepath.Join(root, "v1.2.3.info")); err != nil {
		t.Error(err)
	}
}

func TestPublish_refusesNonCanonicalVersion(t *testing.T) {
	for _, v := range []string{"v1.2", "1.2.3", ""} {
		if err := publish(t.TempDir(), v, t.TempDir(), []string{"."}); err == nil {
			t.Errorf("publish at %q: no error", v)
		}
	}
}
