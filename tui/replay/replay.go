// Package replay writes the plain-text summary that `rlhfstation replay` prints when its output
// is not a terminal (or with --summary), from the run's digest (monitor.RunReport). Reading the
// run itself, ours or another tool's, is engine/runs' work.
package replay
