package gemm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// benchShape is one GEMM of the benchmark: squares, and the shapes of a ~25M-parameter llama
// (dim 512, hidden 1536, vocab 8192) at batch 8×256 tokens.
type benchShape struct {
	name           string
	transA, transB bool
	m, n, k        int
}

var benchShapes = []benchShape{
	{"NN_512", false, false, 512, 512, 512},
	{"NN_1024", false, false, 1024, 1024, 1024},
	{"NN_2048", false, false, 2048, 2048, 2048},
	// Forward y = x·Wᵀ with W [out,in]: M tokens, N out, K in.
	{"fwd_NT_qkvo", false, true, 2048, 512, 512},
	{"fwd_NT_up", false, true, 2048, 1536, 512},
	{"fwd_NT_down", false, true, 2048, 512, 1536},
	{"fwd_NT_head", false, true, 2048, 8192, 512},
	// Weight gradient dW = dYᵀ·X: M out, N in, K tokens.
	{"dW_TN_qkvo", true, false, 512, 512, 2048},
	{"dW_TN_up", true, false, 1536, 512, 2048},
	{"dW_TN_down", true, false, 512, 1536, 2048},
	{"dW_TN_head", true, false, 8192, 512, 2048},
	// Input gradient dX = dY·W: M tokens, N in, K out.
	{"dX_NN_qkvo", false, false, 2048, 512, 512},
	{"dX_NN_up", false, false, 2048, 512, 1536},
	{"dX_NN_down", false, false, 2048, 1536, 512},
	{"dX_NN_head", false, false, 2048, 512, 8192},
	// Decoding 8 sequences a token at a time: x·Wᵀ with M 8.
	{"gen_NT_qkvo", false, true, 8, 512, 512},
	{"gen_NT_up", false, true, 8, 1536, 512},
	{"gen_NT_head", false, true, 8, 8192, 512},
	// LoRA at rank 16 on a 512→512 projection: y += (x·Aᵀ)·Bᵀ, its gradients and dx.
	{"lora_xA_NT", false, true, 2048, 16, 512},
	{"lora_xaB_NT", false, true, 2048, 512, 16},
	{"lora_gB_TN", true, false, 512, 16, 2048},
	{"lora_dxa_NN", false, false, 2048, 16, 512},
	{"lora_gA_TN", true, false, 16, 512, 2048},
	{"lora_dx_NN", false, false, 2048, 512, 16},
}

// BenchmarkSgemm reports GFLOP/s per kernel, thread count and shape, and x_openblas: the ratio
// to OpenBLAS (../shared/tools/sgemm-anchor, NN at the same M N K and thread count) measured
// in the same invocation, so that a busy machine slows both sides alike.
// Narrow it with -bench, e.g. -bench 'Sgemm/avx512/threads2'.
func BenchmarkSgemm(b *testing.B) {
	for _, kr := range kernels() {
		for _, nt := range []int{2, 1} {
			for _, s := range benchShapes {
				if kr == goKernel && s.m*s.n*s.k > 512*512*512 {
					continue // minutes per iteration, and nobody's hot path
				}
				b.Run(fmt.Sprintf("%s/threads%d/%s", kr.name, nt, s.name), func(b *testing.B) {
					benchShapeRun(b, kr, nt, s)
				})
			}
		}
	}
}

func benchShapeRun(b *testing.B, kr *kernel, nt int, s benchShape) {
	defer threads.Store(threads.Load())
	SetThreads(nt)
	rng := rand.New(rand.NewPCG(1, 2))
	ar, ac := s.m, s.k
	if s.transA {
		ar, ac = ac, ar
	}
	br, bc := s.k, s.n
	if s.transB {
		br, bc = bc, br
	}
	a, bm := randSlice(rng, ar*ac), randSlice(rng, br*bc)
	c := make([]float32, s.m*s.n)
	op := operandB{b: bm, ld: bc, trans: s.transB}
	run := func() { sgemm(kr, s.transA, s.m, s.n, s.k, 1, a, ac, op, 0, c, s.n) }
	run() // warm the workspaces
	for b.Loop() {
		run()
	}
	flops := 2 * float64(s.m) * float64(s.n) * float64(s.k)
	gflops := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(gflops, "GFLOP/s")
	if anchor, err := openBLAS(s.m, s.n, s.k, nt); err != nil {
		b.Logf("no OpenBLAS ratio: %v", err)
	} else {
		b.ReportMetric(gflops/anchor, "x_openblas")
		b.ReportMetric(anchor, "openblas_GFLOP/s")
	}
}

var anchorLine = regexp.MustCompile(`: ([0-9.]+) GFLOP/s`)

// openBLAS runs the anchor once for one shape and thread count and returns its GFLOP/s.
func openBLAS(m, n, k, nt int) (float64, error) {
	tool, err := anchorPath()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(tool, strconv.Itoa(m), strconv.Itoa(n), strconv.Itoa(k))
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS="+strconv.Itoa(nt))
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("%s: %v", tool, err)
	}
	mm := anchorLine.FindSubmatch(out)
	if mm == nil {
		return 0, fmt.Errorf("%s printed no GFLOP/s: %q", tool, out)
	}
	return strconv.ParseFloat(string(mm[1]), 64)
}

// anchorPath finds ../shared/tools/sgemm-anchor beside the repository root (the folder with
// go.mod above the test's working directory).
func anchorPath() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
	tool := filepath.Join(dir, "..", "shared", "tools", "sgemm-anchor")
	if _, err := os.Stat(tool); err != nil {
		return "", fmt.Errorf("anchor %s absent", tool)
	}
	return tool, nil
}
