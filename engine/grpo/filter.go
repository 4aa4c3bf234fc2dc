package grpo

import (
	"math"

	"rlhfstation/internal/stats"
)

// varies reports whether a group's rewards differ (NaN rewards left out): the test
// frac_reward_zero_std counts the failures of, and dynamic sampling keeps groups by.
func varies(grp []float64) bool {
	_, std := stats.NaNMeanStd(grp)
	return math.Abs(std) > 1e-8
}

// GroupFilter is dynamic sampling (verl's algorithm.filter_groups, DAPO): generation rounds are
// added one by one; each round's groups whose rewards all agree are dropped, since their
// advantages are zero and they carry no signal, until Need groups are kept. verl decides on a
// chosen metric per completion; here it is the total reward, the one the advantages use.
type GroupFilter struct {
	G, Need int
	Rounds  int   // rounds added
	Kept    []int // indices of the groups kept, counted over every round in order
	Dropped []int // indices of the groups dropped
	groups  int
}

// Add takes one round's rewards (whole groups of G) and reports whether Need groups are kept.
func (f *GroupFilter) Add(rewards []float64) bool {
	f.Rounds++
	for i := 0; i+f.G <= len(rewards); i += f.G {
		if varies(rewards[i : i+f.G]) {
			f.Kept = append(f.Kept, f.groups)
		} else {
			f.Dropped = append(f.Dropped, f.groups)
		}
		f.groups++
	}
	return len(f.Kept) >= f.Need
}

// Batch returns the Need groups to train on: the first Need kept groups, as verl truncates the
// batch to its size; when the rounds ran out first, the kept groups are topped up with dropped
// ones in the order drawn (verl stops with an error there). Their advantages are zero, so
// they add no policy gradient, only the KL term, and the micro-batches keep their shape.
func (f *GroupFilter) Batch() []int {
	out := append([]int(nil), f.Kept[:min(len(f.Kept), f.Need)]...)
	for _, i := range f.Dropped {
		if len(out) >= f.Need {
			break
		}
		out = append(out, i)
	}
	return out
}

// Metrics are dynamic sampling's logged figures: generation rounds used, groups kept and
// dropped over them, and the share of the batch filled with groups whose rewards vary.
func (f *GroupFilter) Metrics() map[string]float64 {
	filled := 1.0
	if f.Need > 0 {
		filled = float64(min(len(f.Kept), f.Need)) / float64(f.Need)
	}
	return map[string]float64{
		"filter_groups/gen_batches":    float64(f.Rounds),
		"filter_groups/kept_groups":    float64(len(f.Kept)),
		"filter_groups/dropped_groups": float64(len(f.Dropped)),
		"filter_groups/filled":         filled,
	}
}
