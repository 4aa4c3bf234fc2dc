// Command rlhfstation is a terminal workstation for GRPO fine-tuning of language models.
// The command line lives in package cli; this file only hands it the process's streams.
package main

import (
	"os"

	"rlhfstation/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
