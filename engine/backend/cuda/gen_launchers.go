//go:build ignore

// Writes launchers.go from the kernels: go generate ./engine/backend/cuda
package main

import (
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"rlhfstation/engine/backend/cuda/internal/launchgen"
)

func main() {
	files, _ := filepath.Glob("kernels/*.cu")
	slices.Sort(files)
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			log.Fatal(err)
		}
		src.Write(b)
		src.WriteString("\n")
	}
	out, err := launchgen.Generate(src.String())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("launchers.go", out, 0o644); err != nil {
		log.Fatal(err)
	}
}
