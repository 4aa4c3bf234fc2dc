package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"rlhfstation/engine/config"
	"rlhfstation/engine/memory"
	"rlhfstation/engine/model"
	"rlhfstation/internal/testmodel"
	"rlhfstation/internal/testref"
	"rlhfstation/safetensors"
)

// memShape is one run of the peak-memory test: a model folder and the run's sizes.
type memShape struct {
	Name               string
	Dir                string // "" = the built-in model
	Batch, Gens        int
	Completion, Prompt int
	Steps              int  // 0: one
	QuantHead          bool // [quant] head
}

// shapedDir writes a random model of the published config (bf16 weights, as released) beside
// the tokenizer tok (the test model's when ""): the estimate counts what the folder's
// tokenizer holds (tokenizer.Footprint), Gemma 3's 86 MB as the test model's few.
func shapedDir(t *testing.T, cfgJSON, tok string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfgJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	mc, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewRandom(*mc, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SaveAs(dir, safetensors.BF16); err != nil {
		t.Fatal(err)
	}
	m = nil
	debug.FreeOSMemory()
	if tok == "" {
		tok = filepath.Join(testmodel.Dir(t), "tokenizer.json")
	}
	raw, err := os.ReadFile(tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// peakChildRun is the run of a peak-measuring child test: the shape its parent passed in
// env (it skips without one), the model folder, and the run's configuration on device.
func peakChildRun(t *testing.T, env, parent, device string) (memShape, string, *config.Config) {
	spec := os.Getenv(env)
	if spec == "" {
		t.Skip("the child of " + parent)
	}
	var s memShape
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatal(err)
	}
	dir := s.Dir
	if dir == "" {
		var err error
		if dir, err = ModelDir(""); err != nil {
			t.Fatal(err)
		}
	}
	c := config.Default()
	c.Preset, c.OutputDir, c.RunName, c.Device = "story", t.TempDir(), "run", device
	c.MaxSteps, c.PerDeviceTrainBatchSize, c.NumGenerations = max(s.Steps, 1), s.Batch, s.Gens
	c.MaxCompletionLength, c.MaxPromptLength = s.Completion, s.Prompt
	c.Quant.Head = s.QuantHead
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	return s, dir, c
}

func TestMemoryPeakChild(t *testing.T) {
	s, dir, c := peakChildRun(t, "RLHFSTATION_MEMORY_CHILD", "TestMemoryEstimateMatchesPeakRSS", "cpu")
	logf := func(format string, a ...any) {
		hwm, rss := procStatus("VmHWM"), procStatus("VmRSS")
		fmt.Fprintf(os.Stderr, "[rss %6.0f MB hwm %6.0f MB] %s\n", float64(rss)/1e6, float64(hwm)/1e6, fmt.Sprintf(format, a...))
	}
	e, err := New(c, Options{ModelDir: dir, ModelName: s.Name, Log: logf, Prompts: prompts(t, "story")})
	if err != nil {
		t.Fatal(err)
	}
	logf("set up")
	go func() {
		for range e.Events() {
		}
	}()
	if err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	peak := procStatus("VmHWM") // before the estimate's own reading of the folder adds to it
	logf("done")
	m, promptTokens, err := estimateInputs(dir, prompts(t, "story"), c.MaxPromptLength)
	if err != nil {
		t.Fatal(err)
	}
	est := memory.For(m, c, promptTokens)
	fmt.Printf("PEAK %d\nESTIMATE %d\n%s\n", peak, est.Total(), est)
}

// procStatus reads a kB field of /proc/self/status, in bytes.
func procStatus(key string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// The memory estimate against the peak resident memory of a real run (one GRPO step in a
// child process, VmHWM) for three shapes: the built-in model at its run sizes, and random
// models of Qwen2.5-0.5B's and gemma-3-270m's published layouts (bf16 files, their widths and
// vocabularies; 4 and 3 of their 24 and 18 blocks unless RLHFSTATION_MEMORY_FULL=1, as a
// full-depth step takes minutes on two cores), the last with Gemma 3's own 262k-entry
// tokenizer; and the Qwen2.5-0.5B one again with [quant] head (its tied head 4-bit). The
// estimate must be within 25%.
func TestMemoryEstimateMatchesPeakRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a 0.5B-shaped model")
	}
	layers := [2]int{4, 3}
	if os.Getenv("RLHFSTATION_MEMORY_FULL") == "1" {
		layers = [2]int{24, 18}
	}
	qwen := shapedDir(t, fmt.Sprintf(memory.Qwen05Config, layers[0]), "")
	shapes := []memShape{
		{Name: "built-in", Batch: 2, Gens: 8, Completion: 48, Prompt: 128, Steps: 4},
		{Name: "qwen2.5-0.5b", Dir: qwen, Batch: 1, Gens: 4, Completion: 16, Prompt: 64, Steps: 2},
		{Name: "qwen2.5-0.5b, 4-bit head", Dir: qwen, Batch: 1, Gens: 4, Completion: 16, Prompt: 64, Steps: 2, QuantHead: true},
		{Name: "gemma-3-270m", Dir: shapedDir(t, fmt.Sprintf(memory.Gemma270Config, layers[1]), testref.SharedData(t, "tokenizers/gemma3/tokenizer.json")), Batch: 1, Gens: 4, Completion: 16, Prompt: 64, Steps: 2},
	}
	for _, s := range shapes {
		spec, _ := json.Marshal(s)
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryPeakChild$", "-test.v")
		cmd.Env = append(os.Environ(), "RLHFSTATION_MEMORY_CHILD="+string(spec))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.Name, err, out)
		}
		var peak, est int64
		for _, line := range strings.Split(string(out), "\n") {
			fmt.Sscanf(line, "PEAK %d", &peak)
			fmt.Sscanf(line, "ESTIMATE %d", &est)
		}
		ratio := float64(est) / float64(peak)
		t.Logf("%s: estimate %.0f MB, measured peak RSS %.0f MB (%.2f×)\n%s", s.Name, float64(est)/1e6, float64(peak)/1e6, ratio, out)
		if peak == 0 || ratio < 0.75 || ratio > 1.25 {
			t.Errorf("%s: estimate %d bytes against a peak of %d: %.2f×, want within 25%%", s.Name, est, peak, ratio)
		}
	}
}
