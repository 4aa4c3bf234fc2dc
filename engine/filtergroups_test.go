package engine

import (
	"context"
	"testing"

	"rlhfstation/rewards"
)

// groupSchedule scores completions so that group k (counted over the run, G completions each)
// has varying rewards exactly when k%3 == 0, and equal ones otherwise.
type groupSchedule struct {
	g      int
	groups int
}

func (*groupSchedule) Name() string { return "schedule" }

func (s *groupSchedule) Score(samples []rewards.Sample) ([]float64, map[string]float64, error) {
	out := make([]float64, len(samples))
	for i := 0; i < len(samples); i += s.g {
		for j := 0; j < s.g; j++ {
			if s.groups%3 == 0 {
				out[i+j] = float64(j % 2) // varies
			} else {
				out[i+j] = 0.5
			}
		}
		s.groups++
	}
	return out, nil, nil
}

// TestFilterGroupsRun runs two steps with dynamic sampling, max_num_gen_batches = 2, one
// micro-batch of 2 prompts × 4 completions a step. Step 1 draws groups 0-3: 0 and 3 vary, so
// two rounds fill the batch. Step 2 draws groups 4-7: only 6 varies, so the batch is topped up
// with group 4 (first dropped) and is half filled. The metrics and the trained batch say so.
func TestFilterGroupsRun(t *testing.T) {
	c := tinyConfig(t, "story", 2)
	c.GradientAccumulationSteps = 1
	c.FilterGroups, c.MaxNumGenBatches = true, 2
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, c.Preset)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	sched := &groupSchedule{g: c.NumGenerations}
	e.funcs = []rewards.Weighted{{Func: sched, Weight: 1}}
	want := []struct {
		rounds, kept, dropped, filled, zeroStd float64
		varying                                []bool // per group of the trained batch
	}{
		{2, 2, 2, 1, 0.5, []bool{true, true}},
		{2, 1, 3, 0.5, 0.75, []bool{true, false}},
	}
	for s, w := range want {
		cursor := e.cursor
		if err := e.trainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
		pendingEvents(e)
		m := e.lastStep
		if m["filter_groups/gen_batches"] != w.rounds || m["filter_groups/kept_groups"] != w.kept ||
			m["filter_groups/dropped_groups"] != w.dropped || m["filter_groups/filled"] != w.filled || m["frac_reward_zero_std"] != w.zeroStd {
			t.Errorf("step %d: metrics %v", s+1, m)
		}
		if got := e.cursor - cursor; got != int(w.rounds)*c.PerDeviceTrainBatchSize {
			t.Errorf("step %d drew %d prompts, want %v rounds of %d", s+1, got, w.rounds, c.PerDeviceTrainBatchSize)
		}
		if len(e.gen.batches) != 1 || len(e.gen.batches[0].rollouts) != c.PerDeviceTrainBatchSize*c.NumGenerations {
			t.Fatalf("step %d: %d micro-batches, want one full one", s+1, len(e.gen.batches))
		}
		rs := e.gen.batches[0].rollouts
		var reward float64
		for k, v := range w.varying {
			grp := rs[k*c.NumGenerations : (k+1)*c.NumGenerations]
			differs, nonzero := false, false
			for _, r := range grp {
				differs = differs || r.reward != grp[0].reward
				nonzero = nonzero || r.adv != 0
				reward += r.reward / float64(len(rs))
			}
			if differs != v || nonzero != v {
				t.Errorf("step %d group %d: rewards vary %v, advantages non-zero %v, want %v", s+1, k, differs, nonzero, v)
			}
		}
		// reward is the trained batch's mean (verl reports the filtered batch).
		if m["reward"] != reward || m["rewards/schedule/mean"] != reward {
			t.Errorf("step %d: reward %v, rewards/schedule/mean %v, want %v", s+1, m["reward"], m["rewards/schedule/mean"], reward)
		}
	}
}
