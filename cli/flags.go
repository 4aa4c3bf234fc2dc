package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"rlhfstation/engine/config"
)

// usageError marks a bad invocation: it exits with 2 instead of 1.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// newFlagSet makes a sub-command's flag set that reports errors as usage errors
// and prints its own -h text on stderr.
func newFlagSet(name, usageLine string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rlhfstation %s\n\nflags:\n", usageLine)
		fs.PrintDefaults()
	}
	return fs
}

// runUsage makes fs's -h text list the run flags grouped, each with its TRL name, its other
// names and its default (config.Flags.PrintDefaults).
func runUsage(fs *flag.FlagSet, usageLine string, flags *config.Flags) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rlhfstation %s\n\nflags:\n", usageLine)
		flags.PrintDefaults(fs.Output())
	}
}

// parseFlags parses args with fs, allowing flags after positional arguments
// (rlhfstation score TEXT --json), and maps parse failures to usage errors.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// hasFlag reports whether args hold --name or -name (with or without =value).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}
