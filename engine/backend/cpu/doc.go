// Package cpu holds the float32 CPU ops of the transformer families, in the style of llm.c:
// every op is a plain function over flat row-major slices, its forward beside its backward
// (XForward / XBackward in the same file). Backward functions accumulate (+=) into the
// gradient slices they are given, so that the caller zeroes gradients once per step and
// ops that share an input simply add their contributions.
//
// Work is spread over the cores with For; matrix products go through the gemm package,
// which parallelises internally and is therefore called from one goroutine.
package cpu
