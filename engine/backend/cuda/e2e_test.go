package cuda_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/cli"
	"rlhfstation/engine/backend/cuda"
	"rlhfstation/engine/builtin"
	"rlhfstation/engine/events"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testref"
)

// The commands end to end on the device the package's tests run on (the CPU stand-in here,
// a GPU where there is one; TestMain names it in RLHFSTATION_CUDA_LIBS): `score --device
// cuda` against `--device cpu` on the built-in model and on a qwen2 and a gpt2 folder, and a
// three-step `--batch --device cuda` run. Small on purpose: the stand-in runs ~100× slower
// than the GPU it stands for.

func onDevice(t *testing.T) {
	t.Helper()
	if _, err := cuda.Probe(); err != nil {
		testref.Missing(t, "no CUDA device and no stand-in: %v", err)
	}
}

func run(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := cli.Run(args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("rlhfstation %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

type scored struct {
	Texts []struct {
		IDs      []int      `json:"ids"`
		LogProbs []*float64 `json:"logprobs"`
	} `json:"texts"`
}

// scoreBoth scores texts on the CPU and on the device and returns the largest and the mean
// difference of the log-probabilities.
func scoreBoth(t *testing.T, dir string, texts ...string) (worst, mean float64, n int) {
	t.Helper()
	var res [2]scored
	for i, dev := range []string{"cpu", "cuda"} {
		out, stderr := run(t, append([]string{"score", "--model", dir, "--device", dev, "--json"}, texts...)...)
		if dev == "cuda" && !strings.Contains(stderr, "computing on cuda") {
			t.Errorf("score --device cuda did not say it computes on the device:\n%s", stderr)
		}
		if err := json.Unmarshal([]byte(out), &res[i]); err != nil {
			t.Fatalf("score --device %s: %v\n%s", dev, err, out)
		}
	}
	for k := range res[0].Texts {
		a, b := res[0].Texts[k], res[1].Texts[k]
		for j := range a.LogProbs {
			if (a.LogProbs[j] == nil) != (b.LogProbs[j] == nil) {
				t.Fatalf("text %d token %d: scored on one device only", k, j)
			}
			if a.LogProbs[j] != nil {
				d := math.Abs(*a.LogProbs[j] - *b.LogProbs[j])
				worst, mean = max(worst, d), mean+d
				n++
			}
		}
	}
	return worst, mean / float64(max(n, 1)), n
}

// folder writes a random model of cfg with the built-in tokenizer into a temporary folder.
func folder(t *testing.T, cfg model.Config, seed uint64, scale float32) string {
	t.Helper()
	src, err := builtin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Vocab = tok.VocabSize()
	m, err := model.NewRandom(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	// Matrices scaled up from the small initialisation, so that the model's predictions are
	// peaked as a trained model's are (log-probs from about −1 to −20), not near uniform.
	for _, p := range m.Params {
		if len(p.Shape) == 2 {
			for i := range p.Data {
				p.Data[i] *= scale
			}
		}
	}
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(src, "tokenizer.json"), filepath.Join(dir, "tokenizer.json"))
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestScoreOnTheDevice: one text within bf16's envelope, and texts of each kind within it:
// PyTorch's own bf16 autocast differs from its float32 on the built-in model (the
// tool-calling one) by up to 0.070, 0.113 and 0.083 (means 0.028, 0.015, 0.025) on these three
// texts (torch.autocast("cpu", torch.bfloat16) over engine/model/testdata/reference.py), so
// the first text is held to 0.075, and all three to 0.1 at most and 0.02 on average, where
// this backend measures 0.056 on the first and 0.078 at most, 0.015 on average over all. The
// random qwen2 and gpt2 (matrices scaled ×8: log-probs from −5 to −11) are held to 0.05.
func TestScoreOnTheDevice(t *testing.T) {
	onDevice(t)
	texts := []string{"The little robot found a key under the old tree.",
		"Tom has 12 apples and gives 5 to Ann. How many apples does Tom have left? #### 7",
		"func add(a, b int) int { return a + b }"}
	builtinDir, err := builtin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	if worst, _, n := scoreBoth(t, builtinDir, texts[0]); n == 0 || !(worst <= 0.075) {
		t.Errorf("built-in llama, %q: log-probs on the device differ from the CPU's by up to %.4f (tolerance 0.075)", texts[0], worst)
	}
	for _, c := range []struct {
		name            string
		dir             string
		maxAbs, meanAbs float64
	}{
		{"built-in llama", builtinDir, 0.1, 0.02},
		{"qwen2", folder(t, model.Config{ModelType: "qwen2", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 160,
			MaxPos: 256, NormEps: 1e-6, RopeTheta: 1e6, QKVBias: true, TieEmbed: true, BOS: -1}, 7, 8), 0.05, 0.05},
		{"gpt2", folder(t, model.Config{ModelType: "gpt2", Dim: 48, Layers: 2, Heads: 3, KVHeads: 3, Hidden: 192,
			MaxPos: 256, NormEps: 1e-5, TieEmbed: true, BOS: -1}, 8, 8), 0.05, 0.05},
	} {
		worst, mean, n := scoreBoth(t, c.dir, texts...)
		t.Logf("%s: %d log-probs, --device cuda against cpu: largest difference %.4f, mean %.4f", c.name, n, worst, mean)
		if n == 0 || !(worst <= c.maxAbs) || !(mean <= c.meanAbs) {
			t.Errorf("%s: log-probs on the device differ from the CPU's by up to %.4f, %.4f on average (%d compared; tolerance %g, %g)",
				c.name, worst, mean, n, c.maxAbs, c.meanAbs)
		}
	}
}

func TestBatchOnTheDevice(t *testing.T) {
	onDevice(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	out := t.TempDir()
	// A few prompts of the built-in model's kind with worked answers: the math preset's
	// baselines of the reasoning are computed from them, on the device too (the 512 of the
	// built-in prompts take minutes on the stand-in). Two steps: the second runs after an
	// update, on the refreshed bf16 copies of the adapters.
	var data strings.Builder
	for i := range 4 {
		fmt.Fprintf(&data, "{\"prompt\": \"Sam has %d marbles and finds %d more. How many marbles does Sam have now?\", \"answer\": \"Sam has %d + %d = %d marbles.\\n#### %d\"}\n",
			i+3, 2*i+1, i+3, 2*i+1, 3*i+4, 3*i+4)
	}
	dataFile := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(dataFile, []byte(data.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _ := run(t, "--batch", "--device", "cuda", "--steps", "2", "--out", out, "--run-name", "r", "--preset", "math",
		"--data", dataFile, "--batch-size", "1", "--num-generations", "4", "--max-completion-length", "16", "--save-steps", "0")
	if !strings.Contains(stdout, "run r completed after 2 steps") {
		t.Errorf("the run did not complete:\n%s", stdout)
	}
	evs, err := events.ReadFile(filepath.Join(out, "r", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, e := range evs {
		switch e.Type {
		case events.RunStart:
			if !strings.HasPrefix(e.Device, "cuda: ") {
				t.Errorf("run_start device %q, want the CUDA device", e.Device)
			}
		case events.Step:
			steps++
			for _, k := range []string{"loss", "reward", "grad_norm", "mem/gpu_bytes"} {
				v, ok := e.Metrics[k]
				if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("step %d: %s = %v (present %v), want a finite value", e.Step, k, v, ok)
				}
			}
			if e.Metrics["mem/gpu_bytes"] <= 0 {
				t.Errorf("step %d: mem/gpu_bytes %v", e.Step, e.Metrics["mem/gpu_bytes"])
			}
			for k, v := range e.Metrics {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("step %d: %s = %v", e.Step, k, v)
				}
			}
		}
	}
	if steps != 2 {
		t.Errorf("%d step events, want 2", steps)
	}
}

// TestRunThatCannotFitIsRefused: on a device of 64 MiB (the stand-in's CUDASIM_MEMORY, read
// when the driver library loads: so in a child process of this test binary) the memory
// estimate refuses the run before the model is put there: exit 2, a message saying what to
// lower, no run folder.
func TestRunThatCannotFitIsRefused(t *testing.T) {
	if out := os.Getenv("CUDA_E2E_CHILD_OUT"); out != "" { // the child: the command itself
		os.Exit(cli.Run([]string{"--batch", "--device", "cuda", "--steps", "3", "--out", out, "--run-name", "r", "--preset", "math"},
			strings.NewReader(""), os.Stdout, os.Stderr))
	}
	onDevice(t)
	if info, _ := cuda.Probe(); !strings.Contains(info.Name, "stand-in") {
		t.Skip("sizes the stand-in's memory (CUDASIM_MEMORY): not on a GPU")
	}
	out := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestRunThatCannotFitIsRefused$")
	cmd.Env = append(os.Environ(), "CUDA_E2E_CHILD_OUT="+out, "CUDASIM_MEMORY=64M", "XDG_CONFIG_HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "of GPU memory but") ||
		!strings.Contains(stderr.String(), "lower per_device_train_batch_size") {
		t.Errorf("%v, want exit 2 and the memory estimate's refusal:\n%s", err, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "r")); !os.IsNotExist(err) {
		t.Errorf("a refused run left its folder (%v)", err)
	}
}
