package main

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsListEveryFlag compares docs/cli.md's table of flags with the
// flags each command defines (the FlagSets that parse, help and completion
// use): every flag of every command is documented for that command, and
// every documented flag exists there. The table lacked --hold-at-least
// until this test.
func TestDocsListEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := docFlags(t, string(doc))
	defined := map[string]bool{}
	for _, cmd := range visibleCommands() {
		f := flagsOf(cmd)
		if f == nil {
			continue
		}
		f.VisitAll(func(fl *flag.Flag) {
			k := cmd.name + " " + flagSpelling(fl.Name)
			defined[k] = true
			if !documented[k] {
				t.Errorf("dlock %s defines %s, which docs/cli.md's flag table does not list for %s", cmd.name, flagSpelling(fl.Name), cmd.name)
			}
		})
	}
	for k := range documented {
		if !defined[k] {
			cmd, fl, _ := strings.Cut(k, " ")
			t.Errorf("docs/cli.md's flag table lists %s for %s, which dlock %s does not define", fl, cmd, cmd)
		}
	}
}

// docFlagCell finds the flags of a table row's first cell: "`--ttl D`",
// "`-v`, `--verbose`".
var docFlagCell = regexp.MustCompile("`(--?[a-zA-Z][\\w-]*)[^`]*`")

// docFlags reads the table under "## Flags and environment variables" of
// docs/cli.md into "command --flag" pairs.
func docFlags(t *testing.T, doc string) map[string]bool {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Flags and environment variables\n")
	if !ok {
		t.Fatal(`docs/cli.md has no section "## Flags and environment variables"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	pairs := map[string]bool{}
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `-") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			t.Fatalf("docs/cli.md: flag row without a commands column: %s", line)
		}
		rows++
		for _, cmd := range strings.Split(cells[2], ",") {
			cmd = strings.TrimSpace(cmd)
			if !slices.Contains(commandNames(), cmd) {
				t.Errorf("docs/cli.md: flag row names %q, which is no command: %s", cmd, line)
			}
			for _, m := range docFlagCell.FindAllStringSubmatch(cells[0], -1) {
				pairs[cmd+" "+m[1]] = true
			}
		}
	}
	if rows == 0 {
		t.Fatal("docs/cli.md: no flag rows found in its flag table")
	}
	return pairs
}
