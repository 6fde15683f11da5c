package main

import (
	"flag"
	"fmt"
	"strings"
)

// parseInterspersed parses args into fs, where flags may come before,
// between and after positional arguments, as in cobra-based tools
// (`dlock status KEY --json`). It returns the positional arguments in
// order. "--" ends the flags: every word after it is positional, even one
// that looks like a flag. With stopAt > 0, the stopAt-th positional
// argument also ends the flags: `dlock run KEY PROGRAM ARGS...` (stopAt 2)
// never parses PROGRAM's own flags as dlock's, with or without "--".
//
// The standard library's flag package stops at the first positional
// argument; this loop restarts it after each one. Which words a flag takes
// (one, or two when its value is the next word) is decided here, as the
// flag package decides it, so that a flag's value is never taken for a
// positional argument and a positional argument never for a value.
//
// An unknown flag is reported as an *unknownFlagError, which names the
// nearest defined flag; -h and --help, unless defined, as flag.ErrHelp.
func parseInterspersed(fs *flag.FlagSet, args []string, stopAt int) (positional []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(positional, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			if stopAt > 0 && len(positional) == stopAt {
				return append(positional, args[i+1:]...), nil
			}
			continue
		}
		name, hasValue := flagName(a)
		words := 1
		if name != "" {
			fl := fs.Lookup(name)
			switch {
			case fl == nil && (name == "h" || name == "help"):
				return nil, flag.ErrHelp
			case fl == nil:
				return nil, &unknownFlagError{arg: strings.SplitN(a, "=", 2)[0], suggestion: nearestFlag(fs, name)}
			case !hasValue && !isBoolFlag(fl) && i+1 < len(args):
				words = 2 // --ttl 30s
			}
		}
		// The flag package sets the value, and reports a bad value or bad
		// syntax ("---x", "-=x") in its own words.
		if err := fs.Parse(args[i : i+words]); err != nil {
			return nil, err
		}
		if fs.NArg() != 0 { // cannot happen: the words are one flag
			return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
		i += words - 1
	}
	return positional, nil
}

// flagName is the name of the flag in the word a ("-x", "--name",
// "--name=value"); "" when a is malformed, which the flag package reports.
func flagName(a string) (name string, hasValue bool) {
	name = strings.TrimPrefix(a[1:], "-")
	if name == "" || name[0] == '-' || name[0] == '=' {
		return "", false
	}
	name, _, hasValue = strings.Cut(name, "=")
	return name, hasValue
}

func isBoolFlag(fl *flag.Flag) bool {
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// unknownFlagError is a flag that the command does not define.
type unknownFlagError struct {
	arg        string // as written: "--jsn"
	suggestion string // the nearest defined flag, "--json"; "" if none is near
}

func (e *unknownFlagError) Error() string { return "unknown flag " + e.arg }

// hint is the suggestion for the user, if any.
func (e *unknownFlagError) hint() string {
	if e.suggestion == "" {
		return ""
	}
	return fmt.Sprintf("did you mean %q?", e.suggestion)
}

// flagSpelling is how usage texts write a flag: -v for a one-letter alias,
// --name otherwise.
func flagSpelling(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// nearestFlag is the spelling of fs's flag nearest to name, or "".
func nearestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(fl *flag.Flag) {
		if len(fl.Name) > 1 { // suggest --verbose, not -v
			names = append(names, fl.Name)
		}
	})
	if s := suggest(name, names); s != "" {
		return flagSpelling(s)
	}
	return ""
}
