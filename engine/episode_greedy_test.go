package engine

import (
	"context"
	"slices"
	"testing"

	"rlhfstation/presets"
)

// Evaluation's greedy pass is greedy with environments too (issue 26): every turn of an
// episode is generated at temperature 0, so two episodes of a prompt, and two evaluations
// with different seeds, write the same tokens; the sampled pass's do not.
func TestEpisodesAtTemperatureZeroAreGreedy(t *testing.T) {
	c := tinyConfig(t, "math", 1)
	c.Temperature = 1.5
	c.MaxCompletionLength = 24
	c.Environments = []presets.Environment{{Name: "calc", Kind: "calculator", MaxTurns: 2, MaxTokens: 48,
		Rewards: []presets.EnvReward{{Name: "answer_via_tool", Weight: 1}}}}
	ps := prompts(t, "math")[:3]
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: ps})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if len(e.envs) == 0 {
		t.Fatal("no environment started")
	}
	tokens := func(temp float32, seed uint64) [][]int {
		b, err := e.generateWith(context.Background(), ps, 2, temp, seed)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]int
		for _, r := range b.rollouts {
			out = append(out, r.tokens)
		}
		return out
	}
	a, b := tokens(0, 1), tokens(0, 2)
	for i := range a {
		if !slices.Equal(a[i], b[i]) || !slices.Equal(a[i], a[i^1]) {
			t.Fatalf("greedy episodes differ: rollout %d %v, with another seed %v, its twin %v", i, a[i], b[i], a[i^1])
		}
	}
	s1, s2 := tokens(float32(c.Temperature), 1), tokens(float32(c.Temperature), 2)
	same := 0
	for i := range s1 {
		if slices.Equal(s1[i], s2[i]) {
			same++
		}
	}
	if same == len(s1) {
		t.Fatalf("sampled episodes at temperature %g are the same under two seeds: the check cannot tell greedy from sampled", c.Temperature)
	}
}
