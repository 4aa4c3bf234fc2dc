package grpo

import (
	"math"
	"slices"
	"testing"
)

// TestGroupFilterMatchesPyTorch runs dynamic sampling over rounds of rewards (groups of 4)
// through the reference and GroupFilter: which groups form the batch and how many rounds
// were drawn, for a batch filled in the first round, one filled after several (the extra kept
// groups cut off), and one the rounds could not fill (topped up with dropped groups).
func TestGroupFilterMatchesPyTorch(t *testing.T) {
	nan := math.NaN()
	rounds := [][]float64{
		{1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0},                 // kept: group 1
		{0.5, 0.5, nan, 0.5, 2, 2, 2, 2.5, nan, nan, nan, 1}, // kept: group 4 (NaN left out, group 3 agrees)
		{0, 1, 0, 1, 1, 0, 1, 1, 3, 3, 3, 3},                 // kept: groups 6, 7
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 1e-12, 0, 0},             // none kept (1e-12 counts as equal)
	}
	cases := []struct{ need, max int }{{1, 4}, {3, 4}, {2, 1}, {4, 2}, {4, 4}, {6, 4}}
	var refRounds [][]*float64
	for _, r := range rounds {
		row := make([]*float64, len(r))
		for i := range r {
			if !math.IsNaN(r[i]) {
				row[i] = &r[i]
			}
		}
		refRounds = append(refRounds, row)
	}
	var ref []refCase
	for _, c := range cases {
		ref = append(ref, refCase{Kind: "filter", Rounds: refRounds, G: 4, Need: c.need, MaxRounds: c.max})
	}
	want := runReference(t, ref)
	for k, c := range cases {
		f := GroupFilter{G: 4, Need: c.need}
		for _, r := range rounds[:c.max] {
			if f.Add(r) {
				break
			}
		}
		got := f.Batch()
		if !slices.Equal(got, want[k].Batch) || f.Rounds != want[k].Used {
			t.Errorf("need %d, at most %d rounds: batch %v after %d rounds, reference %v after %d", c.need, c.max, got, f.Rounds, want[k].Batch, want[k].Used)
		}
	}
	// Hand check of one case: 3 groups needed, rounds 1-3 keep groups 1, 4, 6 (7 cut off).
	f := GroupFilter{G: 4, Need: 3}
	for _, r := range rounds {
		if f.Add(r) {
			break
		}
	}
	m := f.Metrics()
	if got := f.Batch(); !slices.Equal(got, []int{1, 4, 6}) || m["filter_groups/gen_batches"] != 3 ||
		m["filter_groups/kept_groups"] != 4 || m["filter_groups/dropped_groups"] != 5 || m["filter_groups/filled"] != 1 {
		t.Errorf("batch %v, metrics %v", got, m)
	}
}
