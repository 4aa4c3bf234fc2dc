package runs

import (
	"sort"
	"strings"
)

// Metric names: each tool's names mapped onto DESIGN §5's (TRL's GRPO names, which rlhfstation
// logs too), so that the same charts and rules apply. The tables follow the tools' sources:
// transformers' TensorBoardCallback (tags "train/<key>", "eval/<key>"), TRL's GRPOTrainer
// (current and older names), verl's metric_utils and dp_actor (unprefixed "actor/…",
// "critic/…"), OpenRLHF's TensorboardLogger over its PPO status dict ("train/<key>").
// Names no table knows keep their own name and are listed as unmapped.

// rename is one mapping: the tool's name and ours.
type rename struct{ from, to string }

// trlNames: TRL and the Hugging Face Trainer, after the "train/" prefix is removed. TRL's
// current names are DESIGN's; older releases logged these.
var trlNames = []rename{
	{"completion_length", "completions/mean_length"}, // TRL ≤ 0.14
	{"clip_ratio", "clip_ratio/region_mean"},         // TRL 0.16–0.17
}

// verlNames: verl's PPO/GRPO trainer. KL to the reference is actor/kl_loss (use_kl_loss, the
// k3 "low_var_kl" estimator TRL also logs) or actor/reward_kl_penalty (use_kl_in_reward);
// actor/ppo_kl is the KL between the rollout policy and the updated one inside the PPO step, a
// different quantity, so it keeps its name.
var verlNames = []rename{
	{"critic/score/mean", "reward"},
	{"actor/kl_loss", "kl"},
	{"actor/reward_kl_penalty", "kl"},
	{"actor/entropy", "entropy"},
	{"actor/pg_loss", "loss"},
	{"actor/grad_norm", "grad_norm"},
	{"actor/lr", "learning_rate"},
	{"actor/pg_clipfrac", "clip_ratio/region_mean"},
	{"response_length/mean", "completions/mean_length"},
	{"response_length/max", "completions/max_length"},
	{"response_length/min", "completions/min_length"},
	{"response_length/clip_ratio", "completions/clipped_ratio"},
	{"timing_s/step", "perf/step_seconds"},
	{"perf/throughput", "perf/tokens_per_second"}, // per GPU
}

// openrlhfNames: OpenRLHF's PPO status, after the "train/" prefix is removed.
var openrlhfNames = []rename{
	{"policy_loss", "loss"},
	{"actor_grad_norm", "grad_norm"},
	{"actor_lr", "learning_rate"},
	{"response_length", "completions/mean_length"},
	{"response_clip_ratio", "completions/clipped_ratio"},
	{"ppo_clip_ratio", "clip_ratio/region_mean"},
	{"group_reward_std", "reward_std"},
	{"entropy_loss", "entropy"}, // the mean token entropy (its coefficient is applied in the loss)
	{"timing/step_total", "perf/step_seconds"},
}

// trainerSummary are the keys the Hugging Face Trainer logs once when training ends: they mark
// the end of the run rather than a step.
var trainerSummary = map[string]bool{"train_runtime": true, "train_samples_per_second": true,
	"train_steps_per_second": true, "total_flos": true, "train_loss": true}

// designNames are DESIGN §5's metric names; rewards/<f>/mean and rewards/<f>/std are too.
var designNames = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`loss reward reward_std frac_reward_zero_std kl entropy
		clip_ratio/low_mean clip_ratio/high_mean clip_ratio/region_mean clip_ratio/low_min clip_ratio/high_max
		completions/mean_length completions/min_length completions/max_length completions/clipped_ratio
		completions/mean_terminated_length completions/min_terminated_length completions/max_terminated_length
		grad_norm learning_rate ppl/word ppl/phrase ppl/sentence ppl/aggregate ppl/improvement
		ntl/loss ntl/digit_accuracy ntl/total_digits ntl/correct_digits ntl/reward
		perf/step_seconds perf/tokens_per_second perf/rollout_seconds mem/rss_bytes mem/gpu_bytes`) {
		designNames[n] = true
	}
}

// IsDesignName reports whether name is one of DESIGN §5's metric names.
func IsDesignName(name string) bool {
	if designNames[name] {
		return true
	}
	if f, ok := strings.CutPrefix(name, "rewards/"); ok {
		return strings.HasSuffix(f, "/mean") || strings.HasSuffix(f, "/std")
	}
	return false
}

// mapper turns one tool's names into DESIGN's and remembers the names it could not map.
type mapper struct {
	kind     Kind
	table    map[string]rename
	prio     map[string]int // of a rename's source within its target (lower wins)
	unmapped map[string]bool
}

func newMapper(k Kind) *mapper {
	m := &mapper{kind: k, table: map[string]rename{}, prio: map[string]int{}, unmapped: map[string]bool{}}
	var t []rename
	switch k {
	case KindTRL:
		t = trlNames
	case KindVerl:
		t = verlNames
	case KindOpenRLHF:
		t = openrlhfNames
	}
	seen := map[string]int{}
	for _, r := range t {
		m.table[r.from] = r
		m.prio[r.from] = seen[r.to]
		seen[r.to]++
	}
	return m
}

// key maps one raw name; ok is false for names that are not metrics (the trainer's summary).
func (m *mapper) key(raw string) (name string, ok bool) {
	name = raw
	switch m.kind {
	case KindTRL, KindOpenRLHF:
		switch {
		case strings.HasPrefix(raw, "train/"):
			name = strings.TrimPrefix(raw, "train/")
		case strings.HasPrefix(raw, "eval_"): // log_history's evaluation keys
			name = "eval/" + strings.TrimPrefix(raw, "eval_")
		}
	}
	if m.kind == KindTRL && trainerSummary[name] {
		return "", false
	}
	if r, found := m.table[name]; found {
		name = r.to
	} else if m.kind == KindTRL {
		// TRL ≤ 0.14 logged each reward function's mean as rewards/<f>.
		if f, ok := strings.CutPrefix(name, "rewards/"); ok && !strings.Contains(f, "/") {
			name = "rewards/" + f + "/mean"
		}
	}
	if !IsDesignName(name) {
		m.unmapped[name] = true
	}
	return name, true
}

// apply maps a step's raw values. When two raw names map onto one name (verl's two KL
// estimates), the one listed first in the table wins and the other keeps its own name. ended
// reports the Hugging Face Trainer's end-of-training summary keys.
func (m *mapper) apply(raw map[string]float64) (out map[string]float64, ended bool) {
	type cand struct {
		raw  string
		v    float64
		prio int
	}
	best := make(map[string]cand, len(raw))
	out = make(map[string]float64, len(raw))
	for k, v := range raw {
		name, ok := m.key(k)
		if !ok {
			ended = true
			continue
		}
		c := cand{k, v, m.prio[stripPrefix(k)]}
		if b, taken := best[name]; taken {
			if c.prio < b.prio {
				b, c = c, b
			}
			best[name] = b
			out[c.raw] = c.v
			m.unmapped[c.raw] = true
			continue
		}
		best[name] = c
	}
	for name, c := range best {
		out[name] = c.v
	}
	return out, ended
}

func stripPrefix(raw string) string { return strings.TrimPrefix(raw, "train/") }

// Unmapped lists the names kept as they were, sorted.
func (m *mapper) Unmapped() []string {
	out := make([]string, 0, len(m.unmapped))
	for k := range m.unmapped {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// kindOfTags guesses which tool wrote TensorBoard tags: verl's are unprefixed (actor/…,
// critic/…), OpenRLHF's and the Hugging Face Trainer's carry "train/", with OpenRLHF's own
// names. "" when the tags say nothing yet.
func kindOfTags(tags []string) Kind {
	train := false
	for _, t := range tags {
		switch {
		case strings.HasPrefix(t, "critic/") || strings.HasPrefix(t, "actor/") ||
			strings.HasPrefix(t, "response_length/") || strings.HasPrefix(t, "timing_s/"):
			return KindVerl
		case t == "train/policy_loss" || t == "train/actor_lr" || t == "train/actor_grad_norm" ||
			t == "train/response_length" || t == "train/generated_samples":
			return KindOpenRLHF
		case strings.HasPrefix(t, "train/") || strings.HasPrefix(t, "eval/"):
			train = true
		}
	}
	if train {
		return KindTRL
	}
	if len(tags) > 0 {
		return KindTensorBoard
	}
	return ""
}
