package cli

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/events"
	"rlhfstation/internal/testmodel"
)

func TestBatchRunsAndResumes(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := testmodel.Dir(t)
	out := t.TempDir()
	code, stdout, stderr := runCaptured(t, "--batch", "--model", dir, "--out", out, "--steps", "3", "--batch-size", "2",
		"--num-generations", "4", "--max-completion-length", "8", "--save-steps", "2", "--run-name", "r", "--preset", "math")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"step 1/3 reward=", "step 3/3", "checkpoint ", "run r completed after 3 steps", "ntl/digit_accuracy"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	run := filepath.Join(out, "r")
	// Resume to 5 steps: steps 4 and 5 are appended to the same events.jsonl.
	code, stdout, stderr = runCaptured(t, "--batch", "--resume", run, "--steps", "5", "--model", dir)
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, stdout, stderr)
	}
	evs, err := events.ReadFile(filepath.Join(run, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, e := range evs {
		if e.Type == events.Step {
			steps++
		}
	}
	if steps != 5 {
		t.Errorf("events.jsonl holds %d steps after the resume, want 5", steps)
	}
	list, _ := checkpoint.List(filepath.Join(run, "checkpoints"))
	if len(list) == 0 || list[len(list)-1].Step != 5 {
		t.Errorf("checkpoints %v", list)
	}
	// Bad configuration is a usage error naming the key and line.
	cfg := filepath.Join(t.TempDir(), "run.toml")
	os.WriteFile(cfg, []byte("max_steps = 3\nnum_generaitons = 4\n"), 0o644)
	code, _, stderr = runCaptured(t, "--batch", "--model", dir, "--config", cfg, "--out", out)
	if code != 2 || !strings.Contains(stderr, "run.toml:2") || !strings.Contains(stderr, "num_generaitons") {
		t.Errorf("bad key: exit %d, %s", code, stderr)
	}
	// --device cuda is refused with the reason (no GPU here), as a usage error.
	code, _, stderr = runCaptured(t, "--batch", "--model", dir, "--device", "cuda", "--out", out)
	if code != 2 || !strings.Contains(stderr, "--device cuda: ") {
		t.Errorf("cuda: exit %d, %s", code, stderr)
	}
}

func TestWorkstationNeedsATerminal(t *testing.T) {
	code, _, stderr := runCaptured(t)
	if code != 2 || !strings.Contains(stderr, "--batch") {
		t.Fatalf("exit %d, %s", code, stderr)
	}
}

// A typo in [monitor] is a usage error naming the file and line, found before any model
// loads (so before the minutes a real model takes).
func TestMonitorTypoIsRefusedBeforeTheModelLoads(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cfg := filepath.Join(t.TempDir(), "run.toml")
	os.WriteFile(cfg, []byte("max_steps = 3\n\n[monitor]\nkl_max = 0.5\nkl_maxx = 0.4\n"), 0o644)
	out := t.TempDir()
	code, stdout, stderr := runCaptured(t, "--batch", "--config", cfg, "--out", out)
	if code != 2 || !strings.Contains(stderr, "run.toml:5: [monitor] unknown key \"kl_maxx\"") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if strings.Contains(stderr+stdout, "loaded") {
		t.Errorf("the model was loaded before the check:\n%s", stderr)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a failed start left %v in the output folder", ents)
	}
}

// Random bytes as --data: the baselines overflow, and the run is refused naming the text,
// with no stub run folder left behind.
func TestRandomBytesAsDataAreRefusedWithoutAStubFolder(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	data := filepath.Join(t.TempDir(), "random.bin")
	b := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	os.WriteFile(data, b, 0o644)
	out := t.TempDir()
	// As bytes they are not UTF-8: refused before anything else, as bad input (exit 2).
	code, stdout, stderr := runCaptured(t, "--batch", "--model", testmodel.Dir(t), "--data", data, "--out", out, "--steps", "2")
	if code != 2 || !strings.Contains(stderr, "random.bin:1: not UTF-8 text") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// The same bytes read as Latin-1 characters are text whose perplexity overflows.
	os.WriteFile(data, []byte(string(latin1(b))), 0o644)
	code, stdout, stderr = runCaptured(t, "--batch", "--model", testmodel.Dir(t), "--data", data, "--out", out, "--steps", "2")
	if code != 1 || !strings.Contains(stderr, "baseline text") || !strings.Contains(stderr, "perplexity") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if strings.Contains(stderr, "Inf") && strings.Contains(stderr, "json") {
		t.Errorf("the JSON encoder met the +Inf: %s", stderr)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a failed start left %v in the output folder", ents)
	}
}

// --batch -h shows where a run on the built-in model starts beside DESIGN's defaults.
func TestBatchHelpShowsTheBuiltinModelsDefaults(t *testing.T) {
	_, _, errs := runCaptured(t, "--batch", "-h")
	for _, want := range []string{"number of optimizer steps (default 100) [built-in model: 150]",
		"(default 1e-05) [built-in model: 0.0005]", "(default 128) [built-in model: 48]",
		"grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo", "--epsilon_high", "--top_p", "--top_k", "--config FILE"} {
		if !strings.Contains(errs, want) {
			t.Errorf("--batch -h lacks %q", want)
		}
	}
	if strings.Contains(errs, "(default 50) [built-in model: 50]") {
		t.Error("a built-in default equal to DESIGN's is repeated")
	}
}

// latin1 reads bytes as ISO 8859-1 characters.
func latin1(b []byte) []rune {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return r
}

// --init-adapter starts a run from another run's checkpoint (recorded in config.toml); one
// that does not fit the model is refused with the reason.
func TestBatchInitAdapter(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := testmodel.Dir(t)
	out := t.TempDir()
	data := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(data, []byte("Once upon a time\nThe river ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	small := []string{"--model", dir, "--data", data, "--out", out, "--steps", "1", "--batch-size", "1", "--num-generations", "2",
		"--max-completion-length", "4"}
	code, stdout, stderr := runCaptured(t, append([]string{"--batch", "--run-name", "a"}, small...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	ckpt := filepath.Join(out, "a", "checkpoints", "step-000001")
	code, stdout, stderr = runCaptured(t, append([]string{"--batch", "--run-name", "b", "--init-adapter", ckpt}, small...)...)
	if code != 0 || !strings.Contains(stderr, "starting from the adapter "+ckpt) {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	cfg, err := os.ReadFile(filepath.Join(out, "b", "config.toml"))
	if err != nil || !strings.Contains(string(cfg), "init_adapter = ") {
		t.Errorf("config.toml does not record init_adapter (%v):\n%s", err, cfg)
	}
	code, _, stderr = runCaptured(t, append([]string{"--batch", "--run-name", "c", "--init-adapter", filepath.Join(out, "a")}, small...)...)
	if code != 1 || !strings.Contains(stderr, "is not a checkpoint: no adapter_config.json") {
		t.Errorf("a run folder as init adapter: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "c")); !os.IsNotExist(err) {
		t.Errorf("the refused run left its folder (%v)", err)
	}
}
