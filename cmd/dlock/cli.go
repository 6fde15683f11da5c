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
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		return c.cmdRun(ctx, rest)
	case "status":
		return c.cmdStatus(ctx, rest)
	case "ls":
		return c.cmdList(ctx, rest)
	case "serve":
		return c.cmdServe(ctx, rest)
	case "demo":
		return c.cmdDemo(ctx, rest)
	case demoWorkerCommand: // hidden: the demo's worker processes
		return c.cmdDemoWorker(ctx, rest)
	case watchdogCommand: // hidden: dlock run's watchdog
		return c.cmdWatchdog(rest)
	case "help", "-h", "-help", "--help":
		return c.cmdHelp(rest)
	default:
		return c.usageError("", "unknown command %q", cmd)
	}
}

func (c *cli) cmdHelp(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stdout, usageMain)
		return exitOK
	}
	u, ok := usageOf(args[0])
	if !ok {
		return c.usageError("", "no help for unknown command %q", args[0])
	}
	fmt.Fprint(c.stdout, u)
	return exitOK
}

// fail reports err and hints on stderr and returns code.
func (c *cli) fail(code int, err error, hints ...string) int {
	fmt.Fprintf(c.stderr, "dlock: error: %v\n", err)
	for _, h := range hints {
		if h != "" {
			fmt.Fprintf(c.stderr, "dlock: hint: %s\n", h)
		}
	}
	return code
}

// warnf reports a problem that does not change the exit status.
func (c *cli) warnf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "dlock: warning: "+format+"\n", args...)
}

// usageError reports a mistake in the command line of cmd ("" for dlock
// itself) and returns exitUsage.
func (c *cli) usageError(cmd, format string, args ...any) int {
	help := "dlock help"
	if cmd != "" {
		help = "dlock " + cmd + " --help"
	}
	return c.fail(exitUsage, fmt.Errorf(format, args...), "run `"+help+"` for usage and examples")
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

// parse parses args, which hold flags and then at most maxArgs positional
// arguments; with maxArgs < 0, everything after the first positional
// argument is returned unparsed (for `dlock run KEY -- PROGRAM...`, where
// flags may also follow KEY). It returns ok=false with the exit status when
// the command should end: after --help, or on a usage error.
func (c *cli) parse(f *flags, args []string, maxArgs int) (pos []string, code int, ok bool) {
	fail := func(err error) (pos []string, code int, ok bool) {
		if errors.Is(err, flag.ErrHelp) {
			u, _ := usageOf(f.cmd)
			fmt.Fprint(c.stdout, u)
			return nil, exitOK, false
		}
		return nil, c.usageError(f.cmd, "%v", err), false
	}
	if err := f.Parse(args); err != nil {
		return fail(err)
	}
	pos = f.Args()
	if maxArgs < 0 && len(pos) > 0 {
		// Flags may follow KEY: `dlock run KEY --ttl 30s -- make deploy`.
		if err := f.Parse(pos[1:]); err != nil {
			return fail(err)
		}
		pos = append([]string{pos[0]}, f.Args()...)
	} else if maxArgs >= 0 && len(pos) > maxArgs {
		return nil, c.usageError(f.cmd, "unexpected argument %q", pos[maxArgs]), false
	}
	// An alias (-v for --verbose) shares its Value with the long flag:
	// either on the command line beats the variable.
	onCommandLine := map[flag.Value]bool{}
	f.Visit(func(fl *flag.Flag) { onCommandLine[fl.Value] = true })
	var err error
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

// isSet reports whether a flag was given on the command line or through
// its environment variable.
func (f *flags) isSet(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
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
