package engine

import (
	"context"
	"slices"
	"testing"
)

// TestMinPReachesSampling: min_p = 1 keeps only each step's most likely token, so the
// completions of a group are all the same; at 0 they differ. The option reaches the rollouts.
func TestMinPReachesSampling(t *testing.T) {
	for _, minP := range []float64{1, 0} {
		c := tinyConfig(t, "story", 1)
		c.MinP, c.RepetitionPenalty = minP, 1.2
		if err := c.Finish(); err != nil {
			t.Fatal(err)
		}
		e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, c.Preset)})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.trainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
		pendingEvents(e)
		same := true
		for _, b := range e.gen.batches {
			for i := 0; i < len(b.rollouts); i += c.NumGenerations {
				for _, r := range b.rollouts[i : i+c.NumGenerations] {
					same = same && slices.Equal(r.tokens, b.rollouts[i].tokens)
				}
			}
		}
		e.close()
		if same != (minP == 1) {
			t.Errorf("min_p %v: completions of each group identical = %v", minP, same)
		}
	}
}
