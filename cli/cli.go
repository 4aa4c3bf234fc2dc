// Package cli is rlhfstation's command line: each sub-command in its own file reads its flags,
// makes one call into the engine (or quant, rewards, tui) and prints the result on the writers
// it is given. Run is the whole program; main.go only calls it.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"rlhfstation/engine"
)

// Exit codes of DESIGN §12.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// command is one sub-command. Each lives in its own file and registers itself,
// so that commands can be added without touching a central table.
type command struct {
	name    string
	summary string
	order   int // position in the help listing
	run     func(s streams, args []string) error
}

// streams are what a command reads and writes: never os.Stdin, os.Stdout or os.Stderr directly.
type streams struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// exitError carries a specific exit code (130 after an interrupt, say).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// Run runs the command line args (without the program name) and returns the exit code.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
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
	err := c.run(streams{stdin: stdin, stdout: stdout, stderr: stderr}, rest)
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue usageError
	var ce *engine.ConfigError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "rlhfstation:", ue.msg)
		return exitUsage
	case errors.As(err, &ce):
		fmt.Fprintln(stderr, "rlhfstation:", ce)
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

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "rlhfstation: GRPO fine-tuning of language models, live in the terminal")
	fmt.Fprintln(w, "\nusage:\n  rlhfstation [--config run.toml] [flags]          the workstation (TUI)\n  rlhfstation --batch [--config run.toml] [flags]  headless run (rlhfstation --batch -h lists every setting)\n  rlhfstation COMMAND [flags]                      (rlhfstation COMMAND -h for its flags)\n\ncommands:")
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
	width := 0 // the longest name sets the column, so that no summary is pushed out of it
	for _, c := range list {
		width = max(width, len(c.name))
	}
	for _, c := range list {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
}
