package grpo

import "math"

// GroupFilter is dynamic sampling, verl's filter_groups (DAPO): a group whose rewards do not
// vary gives every completion advantage 0 and so no gradient; such groups are dropped and
// more prompts drawn, round after round, until Want groups vary or MaxRounds rounds were
// drawn. A group varies when the standard deviation of its applicable rewards (NaN: not
// applicable) is above 0, or when it has a single completion (as verl keeps those).
//
// Where it departs from verl: when MaxRounds rounds leave fewer than Want varying groups,
// verl stops with an error; here the batch is filled with the dropped groups, in the order
// they were drawn, so that the step trains on what it has (their advantages are 0) and the
// shortfall is logged.
type GroupFilter struct {
	G, Want, MaxRounds int

	Rounds           int        // rounds added so far
	Kept, Dropped    []GroupRef // in the order drawn
	groups, varyings int
}

// GroupRef is one group: the round that drew it and its index in that round.
type GroupRef struct{ Round, Group int }

// Add takes a round's rewards (groups of G consecutive completions) and reports whether the
// batch is complete: Want varying groups, or MaxRounds rounds drawn.
func (f *GroupFilter) Add(rewards []float64) bool {
	for k := 0; k*f.G < len(rewards); k++ {
		ref := GroupRef{Round: f.Rounds, Group: k}
		if Varies(rewards[k*f.G : min((k+1)*f.G, len(rewards))]) {
			f.Kept = append(f.Kept, ref)
		} else {
			f.Dropped = append(f.Dropped, ref)
		}
	}
	f.Rounds++
	return f.Done()
}

// Done reports whether no more rounds are needed or allowed.
func (f *GroupFilter) Done() bool {
	return len(f.Kept) >= f.Want || (f.MaxRounds > 0 && f.Rounds >= f.MaxRounds)
}

// Selected are the Want groups the batch trains on: the first varying ones, then (short of
// them) the first dropped ones.
func (f *GroupFilter) Selected() []GroupRef {
	out := append([]GroupRef(nil), f.Kept[:min(len(f.Kept), f.Want)]...)
	for _, d := range f.Dropped {
		if len(out) >= f.Want {
			break
		}
		out = append(out, d)
	}
	return out
}

// Varies reports whether a group's applicable rewards vary (population standard deviation
// above 0, as numpy's std that verl takes), or the group is a single completion.
func Varies(group []float64) bool {
	if len(group) == 1 {
		return true
	}
	var sum float64
	n := 0
	for _, v := range group {
		if !math.IsNaN(v) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return false
	}
	mean := sum / float64(n)
	var ss float64
	for _, v := range group {
		if !math.IsNaN(v) {
			ss += (v - mean) * (v - mean)
		}
	}
	return math.Sqrt(ss/float64(n)) > 0
}
