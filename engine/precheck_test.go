package engine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"rlhfstation/engine/config"
	"rlhfstation/engine/events"
	"rlhfstation/rewards"
)

// brokenWeights copies the test model's folder with its weights replaced by garbage: a check
// that fails on it with its own message, not a load error, ran before the model loaded.
func brokenWeights(t *testing.T) string {
	t.Helper()
	src, dir := tinyModelDir(t), t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		b, err := os.ReadFile(filepath.Join(src, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(en.Name(), ".safetensors") {
			b = []byte("not a safetensors file")
		}
		if err := os.WriteFile(filepath.Join(dir, en.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestChecksComeBeforeTheModelLoads(t *testing.T) {
	broken := brokenWeights(t)
	cases := []struct {
		name string
		edit func(t *testing.T, o *Options, c *config.Config)
		want string
	}{
		{"completion longer than the context", func(t *testing.T, o *Options, c *config.Config) { c.MaxCompletionLength = 256 },
			"max_completion_length 256 leaves no room for a prompt: the model's context is 256 tokens"},
		{"output folder is a file", func(t *testing.T, o *Options, c *config.Config) {
			f := filepath.Join(t.TempDir(), "file")
			os.WriteFile(f, nil, 0o644)
			c.OutputDir = filepath.Join(f, "runs")
		}, "is not a folder"},
		{"foreign baselines", func(t *testing.T, o *Options, c *config.Config) {
			p := filepath.Join(t.TempDir(), "baselines.json")
			b := rewards.Baselines{Format: rewards.BaselinesFormat, Samples: 3, ModelHash: "sha256:0123456789abcdef0123", TokenizerHash: "sha256:fedcba"}
			b.Levels.Word, b.Levels.Phrase, b.Levels.Sentence = 10, 20, 30
			if err := b.Save(p); err != nil {
				t.Fatal(err)
			}
			c.Baselines = p
		}, "the baselines were made with model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(t, "story", 2)
			o := Options{ModelDir: broken, ModelName: "tiny", Prompts: prompts(t, "story")}
			tc.edit(t, &o, c)
			_, err := New(c, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(c.OutputDir); len(entries) > 0 {
				t.Errorf("a refused start left %d entries in the output folder", len(entries))
			}
		})
	}
}

// An output folder on a read-only or nearly full disk is refused before the model loads.
func TestOutputDiskCheckedBeforeTheModelLoads(t *testing.T) {
	for _, mnt := range []struct{ opts, want string }{{"size=1m,ro", "cannot write in"}, {"size=8k", "free on its disk"}} {
		disk := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", mnt.opts, "tmpfs", disk).CombinedOutput(); err != nil {
			if os.Getenv("RLHFSTATION_REQUIRE_REFERENCES") != "" && os.Geteuid() == 0 {
				t.Fatalf("cannot mount a tmpfs (%v: %s)", err, out)
			}
			t.Skipf("cannot mount a tmpfs here (%v: %s)", err, out)
		}
		t.Cleanup(func() { syscall.Unmount(disk, syscall.MNT_DETACH) })
		c := tinyConfig(t, "story", 2)
		c.OutputDir = filepath.Join(disk, "runs")
		_, err := New(c, Options{ModelDir: brokenWeights(t), ModelName: "tiny", Prompts: prompts(t, "story")})
		if err == nil || !strings.Contains(err.Error(), mnt.want) {
			t.Errorf("tmpfs %s: %v, want %q", mnt.opts, err, mnt.want)
		}
	}
}

// A resume scores against the run's own baselines.json instead of recomputing them.
func TestResumeReadsTheRunsBaselines(t *testing.T) {
	c := tinyConfig(t, "story", 2)
	_, e, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.RunDir(), "baselines.json")
	b, err := rewards.LoadBaselines(path)
	if err != nil {
		t.Fatal(err)
	}
	b.Levels.Word *= 3 // a value recomputing would not give
	if err := b.Save(path); err != nil {
		t.Fatal(err)
	}
	c2 := tinyConfig(t, "story", 3)
	evs, e2, err := run(t, c2, e.RunDir(), "story")
	if err != nil {
		t.Fatal(err)
	}
	var logged bool
	for _, ev := range evs {
		if ev.Type == events.Log && strings.Contains(ev.Message, "baselines from the run's") {
			logged = true
		}
	}
	if !logged || e2.base.Levels.Word != b.Levels.Word {
		t.Errorf("resume: logged %v, word baseline %g, want the run's %g", logged, e2.base.Levels.Word, b.Levels.Word)
	}
}

// Prompts longer than a rollout keeps are reported at the start instead of cut silently.
func TestLongPromptsAreReported(t *testing.T) {
	c := tinyConfig(t, "story", 1)
	c.MaxPromptLength = 3
	evs, _, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == events.Log && strings.Contains(ev.Message, "prompts checked are longer than 3 tokens (max_prompt_length 3") {
			return
		}
	}
	t.Error("no log line reports the prompts cut to max_prompt_length")
}
