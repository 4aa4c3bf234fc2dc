package cuda

//go:generate go run gen_launchers.go

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"slices"
	"strings"
)

//go:embed kernels/prelude.cuh kernels/*.cu
var kernelFS embed.FS

// kernelSource is the one translation unit NVRTC compiles: the prelude, then every .cu file
// in name order, each introduced by a #line so that messages name the file.
func kernelSource() string {
	var b strings.Builder
	add := func(name string) {
		data, err := kernelFS.ReadFile("kernels/" + name)
		if err != nil {
			panic(err) // embedded: cannot fail
		}
		b.WriteString("#line 1 \"" + name + "\"\n")
		b.Write(data)
		b.WriteString("\n")
	}
	add("prelude.cuh")
	for _, n := range kernelFiles() {
		add(n)
	}
	return b.String()
}

func kernelFiles() []string {
	entries, _ := fs.ReadDir(kernelFS, "kernels")
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".cu") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// sourceHash identifies the kernels' text (part of the compiled module's cache key).
func sourceHash() string {
	h := sha256.Sum256([]byte(kernelSource()))
	return hex.EncodeToString(h[:])
}
