package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// cli is one invocation of dlock: where it reads and writes.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// describe: parse only hands the command's FlagSet over, in
	// described, and stops the command (see flagsOf).
	describe  bool
	described *flags
}

// run is the dlock command. It returns the process's exit status; see
// exitcode.go.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	quietClientLogs()
	if len(args) == 0 {
		fmt.Fprint(stderr, usageMain)
		return exitUsage
	}
	cmd, ok := lookupCommand(args[0])
	if !ok {
		return c.unknownCommand(args[0])
	}
	return cmd.run(c, ctx, args[1:])
}

// unknownCommand reports a command that dlock does not have, with the one
// the user probably meant.
func (c *cli) unknownCommand(name string) int {
	var hint string
	if s := suggest(name, commandNames()); s != "" {
		hint = fmt.Sprintf("did you mean %q?", s)
	}
	return c.fail(exitUsage, fmt.Errorf("unknown command %q", name), hint, "run `dlock help` for usage and examples")
}

func (c *cli) cmdHelp(_ context.Context, args []string) int {
	f := newFlags("help")
	pos, code, ok := c.parse(f, args, 1)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		fmt.Fprint(c.stdout, usageMain)
		return exitOK
	}
	u, ok := usageOf(pos[0])
	if !ok {
		var hint string
		if s := suggest(pos[0], commandNames()); s != "" {
			hint = fmt.Sprintf("did you mean %q?", s)
		}
		return c.fail(exitUsage, fmt.Errorf("no help for unknown command %q", pos[0]), hint, "run `dlock help` for usage and examples")
	}
	fmt.Fprint(c.stdout, u)
	return exitOK
}

// fail reports err and hints on stderr and returns code.
func (c *cli) fail(code int, err error, hints ...string) int {
	fmt.Fprintf(c.stderr, "dlock: error: %s\n", errorText(err))
	for _, h := range hints {
		if h != "" {
			fmt.Fprintf(c.stderr, "dlock: hint: %s\n", h)
		}
	}
	return code
}

// errorText is err's message without the "dlock: " that the library's
// errors start with ("dlock: invalid key"), at the start or where the CLI
// wrapped one ("backend URL: dlock: server unavailable"): the line
// already says dlock, once. (A quoted key that holds ": dlock: " loses it
// too; the error still names the key well enough.)
func errorText(err error) string {
	msg := strings.TrimPrefix(err.Error(), "dlock: ")
	return strings.ReplaceAll(msg, ": dlock: ", ": ")
}

// warnf reports a problem that does not change the exit status.
func (c *cli) warnf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "dlock: warning: "+format+"\n", args...)
}

// usageError reports a mistake in the command line of cmd ("" for dlock
// itself) and returns exitUsage.
func (c *cli) usageError(cmd, format string, args ...any) int {
	return c.fail(exitUsage, fmt.Errorf(format, args...), "run `"+helpCommand(cmd)+"` for usage and examples")
}

// helpCommand is the command that shows cmd's usage ("" for dlock itself).
func helpCommand(cmd string) string {
	if cmd == "" {
		return "dlock help"
	}
	return "dlock " + cmd + " --help"
}

// flags is the FlagSet of one subcommand, which also reads every flag from
// an environment variable: --no-wait from DLOCK_NO_WAIT, and so on. The
// command line wins over the environment.
type flags struct {
	*flag.FlagSet
	cmd     string
	fromEnv map[string]string // flag name -> variable it was read from
}

func newFlags(cmd string) *flags {
	fs := flag.NewFlagSet("dlock "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by parse, usage by -h
	return &flags{FlagSet: fs, cmd: cmd, fromEnv: map[string]string{}}
}

// envName is the environment variable that sets a flag.
func envName(flagName string) string {
	return "DLOCK_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse parses args, where flags may come before, between and after the
// positional arguments (see parseInterspersed), which may be at most
// maxArgs; with maxArgs < 0 (for `dlock run KEY [--] PROGRAM...`), the
// second positional argument and everything after it are PROGRAM's, never
// parsed. It returns ok=false with the exit status when the command should
// end: after --help, or on a usage error.
func (c *cli) parse(f *flags, args []string, maxArgs int) (pos []string, code int, ok bool) {
	if c.describe {
		c.described = f
		return nil, exitOK, false
	}
	stopAt := 0
	if maxArgs < 0 {
		stopAt = 2
	}
	pos, err := parseInterspersed(f.FlagSet, args, stopAt)
	var unknown *unknownFlagError
	switch {
	case errors.Is(err, flag.ErrHelp):
		u, _ := usageOf(f.cmd)
		fmt.Fprint(c.stdout, u)
		return nil, exitOK, false
	case errors.As(err, &unknown):
		return nil, c.fail(exitUsage, err, unknown.hint(), "run `"+helpCommand(f.cmd)+"` for usage and examples"), false
	case err != nil:
		return nil, c.usageError(f.cmd, "%v", err), false
	case maxArgs >= 0 && len(pos) > maxArgs:
		return nil, c.usageError(f.cmd, "unexpected argument %q", pos[maxArgs]), false
	}
	// An alias (-v for --verbose) shares its Value with the long flag:
	// either on the command line beats the variable.
	onCommandLine := map[flag.Value]bool{}
	f.Visit(func(fl *flag.Flag) { onCommandLine[fl.Value] = true })
	err = nil
	f.VisitAll(func(fl *flag.Flag) {
		// One-letter flags are aliases (-v for --verbose): the long name's
		// variable covers them.
		if err != nil || onCommandLine[fl.Value] || len(fl.Name) == 1 {
			return
		}
		name := envName(fl.Name)
		v, set := os.LookupEnv(name)
		if !set || v == "" {
			return
		}
		if e := f.Set(fl.Name, v); e != nil {
			err = fmt.Errorf("environment variable %s=%q: %v", name, v, e)
			return
		}
		f.fromEnv[fl.Name] = name
	})
	if err != nil {
		return nil, c.usageError(f.cmd, "%v", err), false
	}
	return pos, exitOK, true
}

// source names where a flag's value came from, for error messages.
func (f *flags) source(name string) string {
	if env, ok := f.fromEnv[name]; ok {
		return env
	}
	return "--" + name
}

// isSet reports whether a flag was given on the command line, by its name
// or an alias (-n for --no-wait, which shares its Value), or through its
// environment variable.
func (f *flags) isSet(name string) bool {
	want := f.Lookup(name)
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name || (want != nil && fl.Value == want.Value) })
	return set
}

// fmtDuration rounds d for people.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDuration(-d)
	case d < time.Millisecond:
		return d.String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
