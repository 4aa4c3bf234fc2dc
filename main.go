// Command rlhfstation is a terminal workstation for GRPO fine-tuning of language models.
// This file holds the command line only: flags and sub-commands are dispatched from here.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit codes of DESIGN §12.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// command is one sub-command. Each lives in its own cmd_*.go file and registers itself,
// so that commands can be added without touching a central table.
type command struct {
	name    string
	summary string
	order   int // position in the help listing
	run     func(args []string) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// usageError marks a bad invocation: it exits with 2 instead of 1.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// exitError carries a specific exit code (130 after an interrupt, say).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	name, rest := "", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, rest = args[0], args[1:]
	}
	if name == "help" {
		printUsage(stdout)
		return exitOK
	}
	if name == "" {
		// No sub-command: the workstation, or a headless run with --batch.
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			printUsage(stdout)
			return exitOK
		}
		name = "workstation"
		if hasFlag(args, "batch") {
			name = "batch"
		}
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "rlhfstation: unknown command %q\n\n", name)
		printUsage(stderr)
		return exitUsage
	}
	err := c.run(rest)
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "rlhfstation:", ue.msg)
		return exitUsage
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "rlhfstation:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "rlhfstation:", err)
	return exitFailed
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

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "rlhfstation: GRPO fine-tuning of language models, live in the terminal")
	fmt.Fprintln(w, "\nusage:\n  rlhfstation                 the workstation (TUI)\n  rlhfstation --batch [flags] headless run (rlhfstation --batch -h for its flags)\n  rlhfstation COMMAND [flags] (rlhfstation COMMAND -h for its flags)\n\ncommands:")
	list := make([]command, 0, len(commands))
	for _, c := range commands {
		if c.name == "workstation" || c.name == "batch" {
			continue
		}
		list = append(list, c)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].order != list[j].order {
			return list[i].order < list[j].order
		}
		return list[i].name < list[j].name
	})
	for _, c := range list {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
}

// newFlagSet makes a sub-command's flag set that reports errors as usage errors
// and prints its own -h text.
func newFlagSet(name, usageLine string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rlhfstation %s\n\nflags:\n", usageLine)
		fs.PrintDefaults()
	}
	return fs
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
