// Command modproxy publishes modules of dlock's working tree at one version
// into a directory laid out as a Go module proxy, so that a module outside
// the repository can `go get` and `go install` them with
// GOPROXY=file://DIR as a user would from the real proxy:
//
//	go run ./modproxy -root REPO -version v0.1.0 -out DIR MODULEDIR...
//
// MODULEDIR is a module's directory relative to REPO ("." for the root).
// A module holds the files Git would commit (tracked, or untracked and not
// ignored): built binaries and other ignored files stay out, as they stay
// out of a tag. Files of nested modules are left out as the go command
// leaves them out (golang.org/x/mod/zip).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	root := flag.String("root", ".", "the repository's root `directory`")
	version := flag.String("version", "", "the `version` to publish every module at, such as v0.1.0")
	out := flag.String("out", "", "the proxy `directory` to write (created if missing)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: modproxy -root REPO -version VERSION -out DIR MODULEDIR...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *version == "" || *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := publish(*root, *version, *out, flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "modproxy: %v\n", err)
		os.Exit(1)
	}
}

func publish(root, version, out string, dirs []string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version (vX.Y.Z)", version)
	}
	files, err := gitFiles(root)
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		if err := publishModule(root, path.Clean(filepath.ToSlash(dir)), version, out, files); err != nil {
			return fmt.Errorf("module in %s: %w", dir, err)
		}
	}
	return nil
}

// gitFiles lists the slash-separated paths, relative to root, of the files
// a commit of root's working tree would hold.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("list the files of %s: git ls-files: %v: %s", root, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var files []string
	for _, f := range strings.Split(string(b), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}

func publishModule(root, dir, version, out string, all []string) error {
	gomod, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
	if err != nil {
		return err
	}
	modPath := modfile.ModulePath(gomod)
	if modPath == "" {
		return errors.New("go.mod names no module")
	}
	m := module.Version{Path: modPath, Version: version}
	escaped, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o777); err != nil {
		return err
	}

	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	var files []zip.File
	for _, f := range all {
		if !strings.HasPrefix(f, prefix) {
			continue
		}
		abs := filepath.Join(root, filepath.FromSlash(f))
		if _, err := os.Lstat(abs); errors.Is(err, os.ErrNotExist) {
			continue // tracked but deleted in the working tree
		}
		files = append(files, file{path: strings.TrimPrefix(f, prefix), abs: abs})
	}
	var z bytes.Buffer
	if err := zip.Create(&z, m, files); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		version + ".mod":  gomod,
		version + ".zip":  z.Bytes(),
		version + ".info": info,
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o666); err != nil {
			return err
		}
	}
	return addToList(filepath.Join(vdir, "list"), version)
}

// addToList adds version to a proxy's list of a module's versions, once.
func addToList(list, version string) error {
	b, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, v := range strings.Fields(string(b)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(list, append(b, version+"\n"...), 0o666)
}

// file is a working-tree file to zip, at its path inside the module.
type file struct{ path, abs string }

func (f file) Path() string                 { return f.path }
func (f file) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs) }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.abs) }
