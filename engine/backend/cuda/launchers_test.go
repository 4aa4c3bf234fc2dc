package cuda

import (
	"os"
	"testing"

	"rlhfstation/engine/backend/cuda/internal/launchgen"
)

// TestLaunchersMatchKernels regenerates the typed launchers from the kernels' signatures:
// a kernel whose parameters changed without `go generate` fails here.
func TestLaunchersMatchKernels(t *testing.T) {
	var src []byte
	for _, f := range kernelFiles() {
		b, err := os.ReadFile("kernels/" + f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(append(src, b...), '\n')
	}
	want, err := launchgen.Generate(string(src))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("launchers.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("launchers.go is out of date with kernels/*.cu: run go generate ./engine/backend/cuda")
	}
}
