package main

import (
	"context"
	"flag"
	"io"
	"regexp"
	"sort"
	"strings"
)

// command is one dlock command. The table of them, commands, is the one
// place that names the commands: run dispatches on it, and help, the
// suggestions for a mistyped command and `dlock completion` read it. A
// command's flags are not listed here but read from the FlagSet that the
// command itself builds (flagsOf), so completion cannot drift from what
// the command accepts; TestUsageDocumentsEveryFlag checks that each usage
// text documents them.
type command struct {
	name    string
	aliases []string // other names that run it: --version for version
	summary string   // one line, for zsh's completion menu
	usage   string   // its --help; "" for a hidden command
	run     func(c *cli, ctx context.Context, args []string) int
	// args completes positional arguments: fixed words (help's commands,
	// completion's shells); nil when they are not knowable (keys).
	args func() []string
	// operand names a positional argument that completion cannot offer
	// words for: "KEY", or "[PREFIX]" when it may be left out.
	operand string
	// program: positional arguments after the first are a program and
	// its arguments (dlock run KEY PROGRAM...), completed as commands.
	program bool
	hidden  bool // started by dlock itself: not offered to people
}

// commands is filled by init: the help command reads the table it is in.
var commands []command

func init() {
	commands = []command{
		{name: "run", summary: "run PROGRAM while holding the lock KEY (or a permit, a read lease)", usage: usageRun, run: (*cli).cmdRun, operand: "KEY", program: true},
		{name: "elect", summary: "run PROGRAM while leading the election KEY, and campaign again", usage: usageElect, run: (*cli).cmdElect, operand: "KEY", program: true},
		{name: "leader", summary: "who leads the election KEY; with --watch, every change", usage: usageLeader, run: (*cli).cmdLeader, operand: "KEY"},
		{name: "status", summary: "who holds KEY, who waits for it", usage: usageStatus, run: (*cli).cmdStatus, operand: "KEY"},
		{name: "revoke", summary: "end the grants of KEY on the server: remove a stuck holder", usage: usageRevoke, run: (*cli).cmdRevoke, operand: "KEY"},
		{name: "ls", summary: "every held or awaited lock", usage: usageList, run: (*cli).cmdList, operand: "[PREFIX]"},
		{name: "serve", summary: "run a lock server (an embedded etcd)", usage: usageServe, run: (*cli).cmdServe},
		{name: "gateway", summary: "serve the locks of a backend over HTTP/JSON, for any language", usage: usageGateway, run: (*cli).cmdGateway},
		{name: "demo", summary: "watch a lock fail, and fencing save the day", usage: usageDemo, run: (*cli).cmdDemo},
		{name: "version", aliases: []string{"--version", "-version"}, summary: "print dlock's version", usage: usageVersion, run: (*cli).cmdVersion},
		{name: "completion", summary: "print a shell completion script (bash, zsh)", usage: usageCompletion, run: (*cli).cmdCompletion, args: completionShells},
		{name: "help", aliases: []string{"-h", "-help", "--help"}, summary: "show the usage of a command", usage: usageHelp, run: (*cli).cmdHelp, args: commandNames},
		{name: demoWorkerCommand, run: (*cli).cmdDemoWorker, hidden: true},
		{name: watchdogCommand, run: func(c *cli, _ context.Context, args []string) int { return c.cmdWatchdog(args) }, hidden: true},
	}
}

// lookupCommand finds a command by its name or an alias.
func lookupCommand(name string) (command, bool) {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd, true
		}
		for _, a := range cmd.aliases {
			if a == name {
				return cmd, true
			}
		}
	}
	return command{}, false
}

// visibleCommands are the commands people use, in the table's order.
func visibleCommands() []command {
	var v []command
	for _, cmd := range commands {
		if !cmd.hidden {
			v = append(v, cmd)
		}
	}
	return v
}

// commandNames are the names of the visible commands.
func commandNames() []string {
	var names []string
	for _, cmd := range visibleCommands() {
		names = append(names, cmd.name)
	}
	return names
}

// flagsOf returns the FlagSet that cmd builds, without running it: in
// describe mode, parse hands the FlagSet over and stops the command
// before it reads its arguments or does anything. nil if cmd takes no
// flags.
func flagsOf(cmd command) *flags {
	c := &cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, describe: true}
	cmd.run(c, context.Background(), nil)
	return c.described
}

// flagInfo is a flag as completion offers it.
type flagInfo struct {
	spelling string // --json, -v
	value    bool   // takes a value: --ttl 30s
	doc      string // from the usage text, for zsh's menu
}

// flagInfos lists cmd's flags, long ones first, each sorted.
func flagInfos(cmd command) []flagInfo {
	f := flagsOf(cmd)
	if f == nil {
		return nil
	}
	var infos []flagInfo
	f.VisitAll(func(fl *flag.Flag) {
		infos = append(infos, flagInfo{spelling: flagSpelling(fl.Name), value: !isBoolFlag(fl), doc: flagDoc(cmd.usage, fl.Name)})
	})
	sort.SliceStable(infos, func(i, j int) bool {
		li, lj := len(infos[i].spelling) > 2, len(infos[j].spelling) > 2
		if li != lj {
			return li
		}
		return infos[i].spelling < infos[j].spelling
	})
	return infos
}

// flagLine matches a flag's line in a usage text: its spellings, then two
// or more spaces, then its description.
var flagLine = regexp.MustCompile(`(?m)^ {4}((?:-\w, )?--[\w-]+)(?: [A-Z:]+)? {2,}(.*)$`)

// flagDoc is the description of flag name in usage: the text of its line,
// without the parenthesis that names the variable and default.
func flagDoc(usage, name string) string {
	for _, m := range flagLine.FindAllStringSubmatch(usage, -1) {
		for _, sp := range strings.Split(m[1], ", ") {
			if sp == flagSpelling(name) {
				doc, _, _ := strings.Cut(m[2], " (")
				doc = strings.TrimRight(doc, ";, ")
				return doc
			}
		}
	}
	return ""
}

// documentedFlag reports whether usage has a flag line for name.
func documentedFlag(usage, name string) bool {
	for _, m := range flagLine.FindAllStringSubmatch(usage, -1) {
		for _, sp := range strings.Split(m[1], ", ") {
			if sp == flagSpelling(name) {
				return true
			}
		}
	}
	return false
}
