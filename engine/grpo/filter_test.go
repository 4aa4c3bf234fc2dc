package grpo

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGroupFilterMatchesReference draws rounds of group rewards (binary, continuous, some not
// applicable, some groups constant) and compares the groups dynamic sampling selects and the
// rounds it draws with the reference definition (testdata/reference.py, verl's
// filter_groups), including batches that stay short after max_num_gen_batches rounds.
func TestGroupFilterMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var cases []refCase
	var filters []*GroupFilter
	for c := 0; c < 24; c++ {
		g := []int{1, 2, 4, 8}[c%4]
		want := 1 + r.IntN(4)
		maxRounds := r.IntN(4) // 0: no limit
		f := &GroupFilter{G: g, Want: want, MaxRounds: maxRounds}
		var rounds [][]*float64
		for !f.Done() && f.Rounds < 12 {
			rewards := make([]float64, want*g)
			for k := 0; k < want; k++ {
				kind := r.IntN(4)
				for j := 0; j < g; j++ {
					v := 0.0
					switch kind {
					case 0: // constant
						v = 1
					case 1: // binary, often all equal
						v = float64(r.IntN(2))
					case 2:
						v = r.Float64()
					case 3: // not applicable sometimes
						v = math.NaN()
						if r.IntN(3) == 0 {
							v = 0.5
						}
					}
					rewards[k*g+j] = v
				}
			}
			f.Add(rewards)
			row := make([]*float64, len(rewards))
			for i := range rewards {
				if !math.IsNaN(rewards[i]) {
					row[i] = &rewards[i]
				}
			}
			rounds = append(rounds, row)
		}
		if !f.Done() {
			continue // the reference would draw a 13th round
		}
		cases = append(cases, refCase{Kind: "filter_groups", Rounds: rounds, G: g, Want: want, MaxRounds: maxRounds})
		filters = append(filters, f)
	}
	short := 0
	for i, want := range runReference(t, cases) {
		f := filters[i]
		got := f.Selected()
		if want.Rounds != f.Rounds || len(got) != len(want.Selected) {
			t.Fatalf("case %d: %d rounds, %d groups; reference %d rounds, %v", i, f.Rounds, len(got), want.Rounds, want.Selected)
		}
		for k := range got {
			if got[k].Round != want.Selected[k][0] || got[k].Group != want.Selected[k][1] {
				t.Errorf("case %d: selected %v, reference %v", i, got, want.Selected)
				break
			}
		}
		if len(f.Kept) < f.Want {
			short++
		}
	}
	if len(cases) < 20 || short == 0 {
		t.Fatalf("%d cases, %d short of varying groups: the test does not cover both", len(cases), short)
	}
}

func TestVaries(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		g    []float64
		want bool
	}{
		{[]float64{1, 1, 1}, false}, {[]float64{1, 0, 1}, true}, {[]float64{3}, true},
		{[]float64{nan, 1, 1}, false}, {[]float64{nan, 1, 0}, true}, {[]float64{nan, nan}, false},
	} {
		if got := Varies(c.g); got != c.want {
			t.Errorf("Varies(%v) = %v", c.g, got)
		}
	}
}
