package cli

import (
	"os"
	"testing"

	"rlhfstation/internal/testmodel"
)

// With RLHFSTATION_CLI_RUN=1 the test binary is rlhfstation itself (Run on its arguments), so
// that tests can run a command as a separate process and signal it.
func TestMain(m *testing.M) {
	if os.Getenv("RLHFSTATION_CLI_RUN") == "1" {
		os.Exit(Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(testmodel.Main(m))
}
