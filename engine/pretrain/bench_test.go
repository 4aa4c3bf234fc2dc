package pretrain

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"rlhfstation/engine/model"
	"rlhfstation/internal/testref"
)

// BenchmarkTrainStep25M: one pretraining step (forward, full-parameter backward, clipping,
// AdamW) of the ~25M-parameter llama shape on 8 windows of 256 tokens. It reports tokens/s,
// the implied rate 6·params·tokens/s in GFLOP/s (the usual estimate of a step's work,
// attention excluded), and that rate as a share of OpenBLAS's SGEMM at 2048×1536×512 (a
// shape of this model's MLP) measured in the same run.
//
//	go test ./engine/pretrain -run '^$' -bench TrainStep25M -benchtime 1x
func BenchmarkTrainStep25M(b *testing.B) {
	cfg := model.Config{ModelType: "llama", Vocab: 8192, Dim: 512, Layers: 8, Heads: 8, KVHeads: 4, Hidden: 1536,
		MaxPos: 256, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1, EOS: []int{0}}
	m, err := NewModel(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	o := Defaults()
	u, err := newUpdater(m, o)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := make([][]int, 8)
	for i := range seqs {
		seqs[i] = make([]int, 256)
		for j := range seqs[i] {
			seqs[i][j] = rng.IntN(cfg.Vocab)
		}
	}
	if _, _, err := u.step(seqs, 1e-4); err != nil { // sizes the buffers
		b.Fatal(err)
	}
	var elapsed time.Duration
	for b.Loop() {
		start := time.Now()
		if _, _, err := u.step(seqs, 1e-4); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
	}
	tokens := float64(b.N * 8 * 256)
	gflops := 6 * float64(m.NumParams()) * tokens / elapsed.Seconds() / 1e9
	b.ReportMetric(tokens/elapsed.Seconds(), "tokens/s")
	b.ReportMetric(gflops, "GFLOP/s")
	b.ReportMetric(float64(m.NumParams())/1e6, "Mparams")
	anchor, err := sgemmAnchor(2048, 1536, 512)
	if err != nil {
		b.Logf("no anchor: %v", err)
		return
	}
	b.ReportMetric(anchor, "openblas_GFLOP/s")
	b.ReportMetric(gflops/anchor, "x_openblas")
}

var anchorRate = regexp.MustCompile(`: ([0-9.]+) GFLOP/s`)

// sgemmAnchor runs ../shared/tools/sgemm-anchor (OpenBLAS, its default threads) at one
// shape and returns its GFLOP/s.
func sgemmAnchor(m, n, k int) (float64, error) {
	tool := filepath.Join(testref.RepoRoot(), "..", "shared", "tools", "sgemm-anchor")
	if _, err := os.Stat(tool); err != nil {
		return 0, fmt.Errorf("anchor %s absent", tool)
	}
	out, err := exec.Command(tool, strconv.Itoa(m), strconv.Itoa(n), strconv.Itoa(k)).Output()
	if err != nil {
		return 0, fmt.Errorf("%s: %v", tool, err)
	}
	mm := anchorRate.FindSubmatch(out)
	if mm == nil {
		return 0, fmt.Errorf("%s printed no GFLOP/s: %q", tool, out)
	}
	return strconv.ParseFloat(string(mm[1]), 64)
}
