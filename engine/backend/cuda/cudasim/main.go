// Command cudasim builds the CPU stand-in of the CUDA driver, NVRTC and cuBLAS into a folder:
//
//	go run ./engine/backend/cuda/cudasim -o DIR
//	RLHFSTATION_CUDA_LIBS=DIR rlhfstation score --device cuda ...
//
// It compiles the C++ sources of package standin with the system's C++ compiler (g++, or
// $CUDASIM_CXX), only when DIR does not already hold a build of the same sources. API.md
// lists what the libraries export and how they behave.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"rlhfstation/engine/backend/cuda/cudasim/standin"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("cudasim", flag.ContinueOnError)
	fl.SetOutput(stderr)
	out := fl.String("o", "", "folder to build the stand-in's libraries into (required)")
	asJSON := fl.Bool("json", false, "print the result as one JSON document")
	cxx := fl.String("cxx", "", "C++ compiler (default $CUDASIM_CXX, else g++)")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: cudasim -o DIR [--json] [--cxx COMPILER]\n\n"+
			"Builds the CPU stand-in of libcuda.so.1, libnvrtc.so.12 and libcublas.so.12 into DIR;\n"+
			"RLHFSTATION_CUDA_LIBS=DIR then runs the CUDA backend on it.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *out == "" || fl.NArg() > 0 {
		fl.Usage()
		return 2
	}
	var log io.Writer = stderr
	res, err := standin.BuildWith(*out, standin.Options{CXX: *cxx, Log: log})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			standin.Result
			Files []string `json:"files"`
		}{res, standin.Files}); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	if res.Built {
		fmt.Fprintf(stdout, "built the CUDA stand-in in %s\n", res.Dir)
	} else {
		fmt.Fprintf(stdout, "the CUDA stand-in in %s is up to date\n", res.Dir)
	}
	fmt.Fprintf(stdout, "run the CUDA backend on it with RLHFSTATION_CUDA_LIBS=%s\n", res.Dir)
	return 0
}
