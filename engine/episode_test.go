package engine

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/engine/model"
	"rlhfstation/internal/testref"
	"rlhfstation/presets"
)

// TestEpisodesInARun runs GRPO with the stand-in environment (engine/env/testdata): episodes of
// several turns whose user turns are masked out of the loss, and a batch whose environment
// crashes, reported as an anomaly and scored as not applicable, the run going on.
func TestEpisodesInARun(t *testing.T) {
	py := testref.Python3(t)
	c := tinyConfig(t, "math", 4)
	c.SaveSteps = 0
	c.MaxCompletionLength = 40
	c.Environments = []presets.Environment{{Name: "standin", Kind: "command", MaxTurns: 3, MaxTokens: 120, Timeout: 30 * time.Second,
		Command: []string{py, filepath.Join("env", "testdata", "standin_env.py")}, Rewards: []presets.EnvReward{{Name: "correct", Weight: 0.5}}}}
	ps := prompts(t, "math")
	for i := range ps {
		ps[i].Extra = map[string]any{"chat_turns": 2}
	}
	// The first batch crashes the environment: its episodes fail; the restarted process serves
	// the second.
	marker := filepath.Join(t.TempDir(), "crashed")
	for i := range ps {
		ps[i].Extra["crash_once"] = marker
	}
	evs, e, err := runWith(t, c, "", ps)
	if err != nil {
		t.Fatal(err)
	}
	var anomalies, failed, turned int
	var maskedSeen bool
	for _, ev := range evs {
		switch ev.Type {
		case events.Anomaly:
			if ev.Rule == "environment" && strings.Contains(ev.Message, "crash") {
				anomalies++
			}
		case events.Samples:
			for _, s := range ev.Samples {
				if s.Failed != "" {
					failed++
				}
				if len(s.Turns) >= 3 {
					turned++
				}
				for _, tu := range s.Turns {
					maskedSeen = maskedSeen || (tu.Masked && tu.Role == "user" && strings.HasPrefix(tu.Content, "Go on"))
				}
			}
		case events.Step:
			for _, k := range []string{"tools/call_frequency", "tools/failure_frequency", "turns/mean", "env/standin/failed", "env/standin/truncated"} {
				if _, ok := ev.Metrics[k]; !ok {
					t.Errorf("step %d has no %s: %v", ev.Step, k, ev.Metrics)
				}
			}
			if ev.Step == 1 && ev.Metrics["env/standin/failed"] == 0 {
				t.Errorf("step 1: no failed episode logged")
			}
			if ev.Step == 2 && !(ev.Metrics["turns/mean"] >= 1) {
				t.Errorf("step 2: turns/mean %v, want at least a turn an episode", ev.Metrics["turns/mean"])
			}
		}
	}
	if anomalies != 1 || failed == 0 || turned == 0 || !maskedSeen {
		t.Fatalf("anomalies %d, failed samples %d, multi-turn samples %d, masked user turn seen %v", anomalies, failed, turned, maskedSeen)
	}
	// The last generation batch's rollouts: the environment's tokens are masked, the model's not.
	var model, masked int
	for _, b := range e.gen.batches {
		for _, r := range b.rollouts {
			if len(r.mask) != len(r.tokens) {
				t.Fatalf("mask of %d for %d tokens", len(r.mask), len(r.tokens))
			}
			for _, m := range r.mask {
				if m {
					model++
				} else {
					masked++
				}
			}
		}
	}
	if model == 0 || masked == 0 {
		t.Fatalf("model tokens %d, masked tokens %d: want both", model, masked)
	}
}

// TestEpisodesContinueTheCache: the turns of a batch's episodes continue the key/value cache
// their earlier turns left, prefilling only the tokens appended since, and give the tokens of
// the reference that prefills each turn's whole history, with the same seed.
func TestEpisodesContinueTheCache(t *testing.T) {
	py := testref.Python3(t)
	play := func(rePrefill bool) *Engine {
		c := tinyConfig(t, "math", 1)
		c.SaveSteps = 0
		c.MaxCompletionLength = 16
		c.Environments = []presets.Environment{{Name: "standin", Kind: "command", MaxTurns: 3, MaxTokens: 120, Timeout: 30 * time.Second,
			Command: []string{py, filepath.Join("env", "testdata", "standin_env.py")}}}
		ps := prompts(t, "math")
		for i := range ps {
			ps[i].Extra = map[string]any{"chat_turns": 3}
		}
		e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: ps})
		if err != nil {
			t.Fatal(err)
		}
		e.rePrefill = rePrefill
		done := make(chan error, 1)
		go func() { done <- e.Run(context.Background()) }()
		for range e.Events() {
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return e
	}
	cont, ref := play(false), play(true)
	turns := 0
	for k, b := range ref.gen.batches {
		for i, r := range b.rollouts {
			got := cont.gen.batches[k].rollouts[i]
			if !slices.Equal(got.tokens, r.tokens) || !slices.Equal(got.mask, r.mask) || got.cut != r.cut {
				t.Errorf("batch %d episode %d: %v (mask %v) on the kept cache, %v (mask %v) prefilled afresh", k, i, got.tokens, got.mask, r.tokens, r.mask)
			}
			for _, tu := range r.ep.turns {
				if tu.model {
					turns++
				}
			}
		}
	}
	if turns <= 8 || cont.prefilled >= ref.prefilled {
		t.Fatalf("%d assistant turns for 8 episodes; prefilled %d tokens on the kept cache, %d afresh: want multi-turn episodes and fewer", turns, cont.prefilled, ref.prefilled)
	}
	t.Logf("%d assistant turns: %d tokens prefilled on the kept cache, %d when each turn prefills its history", turns, cont.prefilled, ref.prefilled)
}

// TestEpisodeDigitsFromTheDecodeStep: an episode's NTL digit distributions come from the
// backend's decode step ([rows × 10] per token, no logit row downloaded): at every token the
// model wrote they equal the softmax over the digit tokens of the same policy's logits
// recomputed by a training forward over the whole episode, and the environment's tokens have
// none.
func TestEpisodeDigitsFromTheDecodeStep(t *testing.T) {
	py := testref.Python3(t)
	c := tinyConfig(t, "math", 1)
	c.SaveSteps, c.MaxCompletionLength, c.LoRA.Dropout = 0, 40, 0
	c.Environments = []presets.Environment{{Name: "standin", Kind: "command", MaxTurns: 3, MaxTokens: 120, Timeout: 30 * time.Second,
		Command: []string{py, filepath.Join("env", "testdata", "standin_env.py")}, Rewards: []presets.EnvReward{{Name: "correct", Weight: 0.5}}}}
	ps := prompts(t, "math")
	for i := range ps {
		ps[i].Extra = map[string]any{"chat_turns": 2}
	}
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: ps})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if e.digits == nil {
		t.Fatal("the math preset found no digit tokens")
	}
	b, err := e.generate(context.Background(), e.nextPrompts(c.PerDeviceTrainBatchSize), 11)
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([][]int, len(b.rollouts))
	q := &model.DigitQuery{IDs: e.digits.IDs, At: make([][]int, len(b.rollouts))}
	for i, r := range b.rollouts {
		seqs[i] = append(append([]int{}, r.prompt...), r.tokens...)
		for k := range r.tokens {
			if r.mask == nil || r.mask[k] {
				q.At[i] = append(q.At[i], len(r.prompt)+k)
			}
		}
	}
	tape := e.model.NewTape()
	if err := e.model.ForwardTrain(tape, seqs, model.TrainOptions{Temperature: float32(c.Temperature), Digits: q}); err != nil {
		t.Fatal(err)
	}
	checked, envTokens := 0, 0
	for i, r := range b.rollouts {
		for k := range r.tokens {
			var got []float32
			if k < len(r.digits) {
				got = r.digits[k]
			}
			if r.mask != nil && !r.mask[k] {
				envTokens++
				if got != nil {
					t.Fatalf("rollout %d: the environment's token %d has digit probabilities", i, k)
				}
			}
		}
		for j, at := range q.At[i] {
			got := r.digits[at-len(r.prompt)]
			logits := tape.DigitLogits[i][j]
			mx := math.Inf(-1)
			for _, l := range logits {
				mx = math.Max(mx, float64(l))
			}
			want := make([]float64, 10)
			var sum float64
			for n, l := range logits {
				p := math.Exp(float64(l) - mx)
				want[e.digits.Digits[n]] += p
				sum += p
			}
			for d := range want {
				if math.Abs(float64(got[d])-want[d]/sum) > 1e-4 {
					t.Fatalf("rollout %d token %d digit %d: %v from the decode step, %v recomputed", i, at-len(r.prompt), d, got[d], want[d]/sum)
				}
			}
			checked++
		}
	}
	t.Logf("%d model tokens checked, %d environment tokens without digits", checked, envTokens)
	if checked == 0 || envTokens == 0 {
		t.Fatalf("%d model tokens, %d environment tokens: want both", checked, envTokens)
	}
}
