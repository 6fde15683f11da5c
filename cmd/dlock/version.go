package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// versionInfo is what `dlock version` reports; the JSON names are part of
// the CLI's interface (docs/cli.md).
type versionInfo struct {
	// Version is the main module's version: v1.2.3 when installed with
	// go install ...@v1.2.3, "(devel)" when built from a clone.
	Version string `json:"version"`
	Module  string `json:"module,omitempty"`
	// Revision, Modified and Time come from the VCS stamp that go build
	// writes when it builds inside a Git checkout.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Time     string `json:"time,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// readVersion reads dlock's version from the build information that the
// Go toolchain embeds in the binary.
func readVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok { // not built with module support: nothing to say but Go's
		return versionInfo{Version: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	}
	return versionFrom(bi)
}

// versionFrom extracts versionInfo from bi.
func versionFrom(bi *debug.BuildInfo) versionInfo {
	v := versionInfo{
		Version:  bi.Main.Version,
		Module:   bi.Main.Path,
		Go:       bi.GoVersion,
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if v.Version == "" {
		v.Version = "(devel)" // a test binary, or go run of a file list
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "vcs.time":
			v.Time = s.Value
		}
	}
	return v
}

// write prints v for people: the version on the first line, details after.
func (v versionInfo) write(w io.Writer) {
	fmt.Fprintf(w, "dlock %s\n", v.Version)
	if v.Module != "" {
		fmt.Fprintf(w, "module:   %s\n", v.Module)
	}
	if v.Revision != "" {
		mod := ""
		if v.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(w, "revision: %s%s\n", v.Revision, mod)
	}
	if v.Time != "" {
		fmt.Fprintf(w, "time:     %s\n", v.Time)
	}
	fmt.Fprintf(w, "go:       %s %s\n", v.Go, v.Platform)
}

func (c *cli) cmdVersion(_ context.Context, args []string) int {
	f := newFlags("version")
	asJSON := f.Bool("json", false, "")
	if _, code, ok := c.parse(f, args, 0); !ok {
		return code
	}
	v := readVersion()
	if *asJSON {
		return c.writeJSON(v)
	}
	v.write(c.stdout)
	return exitOK
}
