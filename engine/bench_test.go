package engine

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/grpo"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/engine/optim"
	"rlhfstation/internal/testref"
	"rlhfstation/quant"
)

// benchSize is the work of one benchmarked GRPO step (bench/README.md): prompts × gens
// sequences, prompts of promptN random ids, new tokens each with no stop token, so both sides
// do the same work.
type benchSize struct{ prompts, gens, promptN, new int }

// tokens is the prompt and completion tokens of every sequence of a step.
func (z benchSize) tokens() int { return z.prompts * z.gens * (z.promptN + z.new) }

// benchStep is the step of the small models: 2 prompts × 8 generations, 32 + 64 tokens.
var benchStep = benchSize{prompts: 2, gens: 8, promptN: 32, new: 64}

// benchStepQwen05B is the step at a real model's size: 1 prompt × 8 generations.
var benchStepQwen05B = benchSize{prompts: 1, gens: 8, promptN: 32, new: 64}

// benchBuiltinShape stands in for the built-in model when engine/builtin/model is absent.
var benchBuiltinShape = model.Config{ModelType: "llama", Vocab: 2048, Dim: 192, Layers: 4, Heads: 6, KVHeads: 2,
	Hidden: 512, MaxPos: 256, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1}

// bench25MShape is a llama of about 25M parameters (29M with its tied 8192×512 embedding).
var bench25MShape = model.Config{ModelType: "llama", Vocab: 8192, Dim: 512, Layers: 8, Heads: 8, KVHeads: 4,
	Hidden: 1536, MaxPos: 512, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1}

// benchQwen05BShape is Qwen2.5-0.5B's shape (its config.json: q/k/v biases, tied head,
// rope_theta 1e6, rms_norm_eps 1e-6): 494,032,768 parameters.
var benchQwen05BShape = model.Config{ModelType: "qwen2", Vocab: 151936, Dim: 896, Layers: 24, Heads: 14, KVHeads: 2,
	Hidden: 4864, MaxPos: 32768, NormEps: 1e-6, RopeTheta: 1e6, TieEmbed: true, BOS: -1}

// grpoBench is one GRPO step's state: an fp32 base (no NF4, as PyTorch's side has none), LoRA
// r 16 / alpha 32 on every linear, AdamW, a reused training tape.
type grpoBench struct {
	size    benchSize
	m       *model.Model
	params  []*optim.Param
	opt     *optim.AdamW
	tape    *model.Tape
	prompts [][]int
}

func newGRPOBench(m *model.Model, size benchSize) *grpoBench {
	lc := lora.Config{R: 16, Alpha: 32, TargetModules: []string{"all-linear"}}
	rng := rand.New(rand.NewPCG(1, 2))
	s := &grpoBench{size: size, m: m, tape: m.NewTape()}
	for _, l := range m.Linears() {
		ll, err := lora.NewLayer(m.Backend(), l.Name, l.In, l.Out, lc, rng)
		if err != nil {
			panic(err)
		}
		l.Adapter = &adapter{layer: ll}
		an, bn := lora.TensorNames(l.Name)
		s.params = append(s.params, &optim.Param{Name: an, Data: ll.A, Grad: ll.GradA},
			&optim.Param{Name: bn, Data: ll.B, Grad: ll.GradB})
	}
	var err error
	if s.opt, err = optim.NewAdamW(m.Backend(), s.params, 0.9, 0.999, 1e-8, 0); err != nil {
		panic(err)
	}
	s.opt.AfterUpdate(m.AdaptersChanged)
	for p := 0; p < size.prompts; p++ {
		ids := make([]int, size.promptN)
		for i := range ids {
			ids[i] = rng.IntN(m.Config.Vocab)
		}
		for g := 0; g < size.gens; g++ {
			s.prompts = append(s.prompts, ids)
		}
	}
	return s
}

// phases are the seconds of one step's parts.
type phases struct{ rollout, scoring, lossBackward, update float64 }

func (p phases) total() float64 { return p.rollout + p.scoring + p.lossBackward + p.update }

// step runs one GRPO step as trainStep does (DESIGN §5: dapo, beta 0.04, group advantages),
// with a reward computed from the tokens (the share of even ids) in place of the preset's.
func (s *grpoBench) step(seed uint64) (phases, error) {
	var ph phases
	m := s.m
	t0 := time.Now()
	gen, err := m.Generate(s.prompts, model.GenerateOptions{MaxNewTokens: s.size.new, Temperature: 1, Seed: seed, NoEOS: true})
	if err != nil {
		return ph, err
	}
	t1 := time.Now()
	seqs := make([][]int, len(s.prompts))
	for i, p := range s.prompts {
		seqs[i] = append(append(make([]int, 0, len(p)+len(gen.Tokens[i])), p...), gen.Tokens[i]...)
	}
	ref, err := m.LogProbs(seqs, 1, model.AdaptersOff)
	if err != nil {
		return ph, err
	}
	t2 := time.Now()
	rewards := make([]float64, len(seqs))
	total := 0
	for i, toks := range gen.Tokens {
		for _, id := range toks {
			if id%2 == 0 {
				rewards[i]++
			}
		}
		rewards[i] /= float64(len(toks))
		total += len(toks)
	}
	adv, _, err := grpo.Advantages(rewards, s.size.gens, grpo.ScaleGroup)
	if err != nil {
		return ph, err
	}
	optim.ZeroGrad(s.m.Backend(), s.params)
	if err := m.ForwardTrain(s.tape, seqs, model.TrainOptions{Temperature: 1, Entropy: true}); err != nil {
		return ph, err
	}
	gs := make([]grpo.Sequence, len(seqs))
	for i, p := range s.prompts {
		n := len(gen.Tokens[i])
		lp, rl := make([]float64, n), make([]float64, n)
		for k := 0; k < n; k++ {
			lp[k], rl[k] = float64(s.tape.LogProbs[i][len(p)+k]), float64(ref[i][len(p)+k])
		}
		gs[i] = grpo.Sequence{LogP: lp, RefLogP: rl, Advantage: adv[i]}
	}
	res, err := grpo.Loss(gs, grpo.Params{Beta: 0.04, Epsilon: 0.2, EpsilonHigh: 0.2, LossType: grpo.LossDAPO, Tokens: total, TopEntropyQuantile: 1})
	if err != nil {
		return ph, err
	}
	dlogp := make([][]float32, len(seqs))
	for i, p := range s.prompts {
		d := make([]float32, len(seqs[i]))
		for k, g := range res.Grad[i] {
			d[len(p)+k] = float32(g)
		}
		dlogp[i] = d
	}
	if err := m.Backward(s.tape, dlogp, nil); err != nil {
		return ph, err
	}
	// The device queues the backward's work: wait for it so that each phase is its own time.
	if err := m.Backend().Sync(); err != nil {
		return ph, err
	}
	t3 := time.Now()
	if _, err := optim.ClipGradNorm(s.m.Backend(), s.params, 1); err != nil {
		return ph, err
	}
	if err := s.opt.Update(1e-5); err != nil {
		return ph, err
	}
	if err := m.Backend().Sync(); err != nil {
		return ph, err
	}
	t4 := time.Now()
	return phases{t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), t3.Sub(t2).Seconds(), t4.Sub(t3).Seconds()}, nil
}

// benchModel is one preset of BenchmarkGRPOStep. An explicit one runs only when -bench names
// it (its step takes minutes and each side holds its fp32 weights, 2 GB for qwen05B), so the
// usual -bench GRPOStep stays quick.
type benchModel struct {
	name     string
	size     benchSize
	explicit bool
	load     func() (*model.Model, error)
}

// benchModels are the benchmarked models: the built-in one (its shape with random weights
// when engine/builtin/model is absent), a random ~25M llama and a random Qwen2.5-0.5B.
func benchModels() []benchModel {
	return []benchModel{
		{"builtin", benchStep, false, func() (*model.Model, error) {
			dir := filepath.Join("builtin", "model")
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
				return model.Load(dir)
			}
			return model.NewRandom(benchBuiltinShape, 1)
		}},
		{"llama25M", benchStep, false, func() (*model.Model, error) { return model.NewRandom(bench25MShape, 1) }},
		{"qwen05B", benchStepQwen05B, true, func() (*model.Model, error) { return model.NewRandom(benchQwen05BShape, 1) }},
	}
}

// benchNamed reports whether the -bench pattern names the sub-benchmark sub itself.
func benchNamed(sub string) bool {
	f := flag.Lookup("test.bench")
	return f != nil && strings.Contains(f.Value.String(), sub)
}

// BenchmarkGRPOStep times one GRPO step (rollout, scoring, loss+backward, update) on each
// model, after one warm-up step, and reports tokens/s (prompt + completion tokens of every
// sequence per second of the step), each phase's seconds and the process's CPU seconds per
// step. qwen05B runs only when named (-bench GRPOStep/qwen05B). Unless -short, it then runs the same step in PyTorch (bench/grpo_step.py: one warm-up
// and as many timed steps, with GOMAXPROCS threads, or $RLHFSTATION_TORCH_THREADS) and reports
// its figures and x-torch, the ratio of the two speeds. See bench/README.md.
func BenchmarkGRPOStep(b *testing.B) {
	for _, bm := range benchModels() {
		b.Run(bm.name, func(b *testing.B) {
			if bm.explicit && !benchNamed(bm.name) {
				b.Skipf("%s runs only when -bench names it (-bench GRPOStep/%s): minutes a step", bm.name, bm.name)
			}
			m, err := bm.load()
			if err != nil {
				b.Fatal(err)
			}
			dev := benchDevice(b, m)
			s := newGRPOBench(m, bm.size)
			if _, err := s.step(0); err != nil { // warm-up: buffers and tape grow once
				b.Fatal(err)
			}
			var sum phases
			cpu0 := cpuSeconds()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ph, err := s.step(uint64(i + 1))
				if err != nil {
					b.Fatal(err)
				}
				sum.rollout += ph.rollout
				sum.scoring += ph.scoring
				sum.lossBackward += ph.lossBackward
				sum.update += ph.update
			}
			b.StopTimer()
			n := float64(b.N)
			cpu := (cpuSeconds() - cpu0) / n
			tokens := float64(bm.size.tokens())
			goRate := tokens * n / sum.total()
			b.ReportMetric(goRate, "tokens/s")
			b.ReportMetric(sum.rollout/n, "rollout-s")
			b.ReportMetric(sum.scoring/n, "scoring-s")
			b.ReportMetric(sum.lossBackward/n, "lossbwd-s")
			b.ReportMetric(sum.update/n, "update-s")
			b.ReportMetric(cpu, "cpu-s")
			b.ReportMetric(float64(m.NumParams()), "params")
			if st, ok := dev.(interface{ PeakBytes() int64 }); ok {
				b.ReportMetric(float64(st.PeakBytes()), "gpu-peak-bytes")
			}
			if testing.Short() || dev != nil {
				return // the PyTorch side of a GPU step is bench/gpu_step.py (bench/gpu.sh)
			}
			py := torchPython(b)
			if py == "" {
				return
			}
			t, err := torchStep(py, &m.Config, bm.size, b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(t.TokensPerS, "torch-tokens/s")
			b.ReportMetric(t.RolloutS, "torch-rollout-s")
			b.ReportMetric(t.ScoringS, "torch-scoring-s")
			b.ReportMetric(t.LossBackwardS, "torch-lossbwd-s")
			b.ReportMetric(t.UpdateS, "torch-update-s")
			b.ReportMetric(t.CPUS, "torch-cpu-s")
			b.ReportMetric(goRate/t.TokensPerS, "x-torch")
		})
	}
}

// benchDevice puts m on the device $RLHFSTATION_BENCH_DEVICE names (bench/gpu.sh sets cuda),
// its linears in NF4 as a run keeps them there; nil (the CPU, float32, as PyTorch's side) when
// unset.
func benchDevice(b *testing.B, m *model.Model) backend.Backend {
	name := os.Getenv("RLHFSTATION_BENCH_DEVICE")
	if name == "" || name == "cpu" {
		return nil
	}
	dev, _, err := OpenDevice(name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dev.Close() })
	if _, _, err := m.Quantize(quant.Default()); err != nil {
		b.Fatal(err)
	}
	if err := m.Use(dev); err != nil {
		b.Fatal(err)
	}
	b.Logf("on %s, linears in NF4", DeviceLabel(dev))
	return dev
}

// torchResult is bench/grpo_step.py's answer.
type torchResult struct {
	Tokens        int     `json:"tokens"`
	RolloutS      float64 `json:"rollout_s"`
	ScoringS      float64 `json:"scoring_s"`
	LossBackwardS float64 `json:"loss_backward_s"`
	UpdateS       float64 `json:"update_s"`
	TokensPerS    float64 `json:"tokens_per_s"`
	CPUS          float64 `json:"cpu_s"`
}

// cpuSeconds is the process's user + system CPU time: on a shared machine, the share of the
// cores a step actually got shows next to its wall time.
func cpuSeconds() float64 {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
}

// torchPython finds a python3 with torch. Without one the Go figures still stand: it says
// so and returns "" (in CI, RLHFSTATION_REQUIRE_REFERENCES=1, testref fails the benchmark).
func torchPython(b *testing.B) string {
	if testref.Required() {
		return testref.Python(b)
	}
	for _, c := range []string{os.Getenv("RLHFSTATION_PYTHON"), "/usr/bin/python3", "python3"} {
		if c != "" && exec.Command(c, "-c", "import torch").Run() == nil {
			return c
		}
	}
	b.Log("no python3 with torch: the PyTorch comparison is left out")
	return ""
}

// torchStep runs the PyTorch step with py on a model of c's shape.
func torchStep(py string, c *model.Config, size benchSize, steps int) (torchResult, error) {
	if c.OBias || c.MLPBias || c.Family() != model.Llama {
		return torchResult{}, fmt.Errorf("bench/grpo_step.py has no %s with those biases", c.ModelType)
	}
	shape, _ := json.Marshal(map[string]any{"vocab": c.Vocab, "dim": c.Dim, "layers": c.Layers, "heads": c.Heads,
		"kv_heads": c.KVHeads, "head_dim": c.HeadDim, "hidden": c.Hidden, "tie": c.TieEmbed, "rope_theta": c.RopeTheta,
		"norm_eps": c.NormEps, "qkv_bias": c.QKVBias})
	threads := os.Getenv("RLHFSTATION_TORCH_THREADS")
	if threads == "" {
		threads = fmt.Sprint(runtime.GOMAXPROCS(0)) // go test -cpu 1,2 compares thread for thread
	}
	cmd := exec.Command(py, filepath.Join("..", "bench", "grpo_step.py"), "--shape", string(shape),
		"--prompts", fmt.Sprint(size.prompts), "--generations", fmt.Sprint(size.gens),
		"--prompt-len", fmt.Sprint(size.promptN), "--new", fmt.Sprint(size.new),
		"--steps", fmt.Sprint(steps), "--warmup", "1", "--threads", threads)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return torchResult{}, fmt.Errorf("bench/grpo_step.py: %w", err)
	}
	var r torchResult
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("bench/grpo_step.py output: %w", err)
	}
	if want := size.tokens(); r.Tokens != want {
		return r, fmt.Errorf("bench/grpo_step.py processed %d tokens a step, the Go step %d", r.Tokens, want)
	}
	return r, nil
}
