package monitor

import (
	"strings"
	"unicode"

	"rlhfstation/engine/events"
)

// TextSignals are the reward-hacking signals of one batch of completions. Words are the
// maximal runs of letters and digits, lower-cased, so punctuation does not split or join them.
type TextSignals struct {
	Completions int `json:"completions"`
	// Repetition: mean over completions with at least 3 words of the share of their word
	// trigrams that repeat an earlier trigram of the same completion (0 = no loop, → 1 = a loop).
	Repetition float64 `json:"repetition"`
	// Distinct1, Distinct2: distinct words (word bigrams) over all words (bigrams) of the
	// batch, the distinct-n of Li et al. (2016). Low values: the completions say the same thing.
	Distinct1 float64 `json:"distinct_1"`
	Distinct2 float64 `json:"distinct_2"`
	// Duplicates: the share of completions identical to an earlier one of the batch.
	Duplicates float64 `json:"duplicates"`
	// MeanLength in words.
	MeanLength float64 `json:"mean_length"`
	// LengthDrift = recent mean length / early mean length − 1 (0 until both are known).
	LengthDrift float64 `json:"length_drift"`
}

// Metrics are the signals under the names completions/… for the step logs.
func (s TextSignals) Metrics() events.Metrics {
	return events.Metrics{
		"completions/repetition":   s.Repetition,
		"completions/distinct_1":   s.Distinct1,
		"completions/distinct_2":   s.Distinct2,
		"completions/duplicates":   s.Duplicates,
		"completions/words":        s.MeanLength,
		"completions/length_drift": s.LengthDrift,
	}
}

func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// Signals measures one batch of completions.
func Signals(completions []string) TextSignals {
	s := TextSignals{Completions: len(completions)}
	if len(completions) == 0 {
		return s
	}
	uni, bi := map[string]bool{}, map[string]bool{}
	seen := map[string]bool{}
	var nUni, nBi, nWords, nRep int
	var rep float64
	for _, c := range completions {
		if seen[c] {
			s.Duplicates++
		}
		seen[c] = true
		w := words(c)
		nWords += len(w)
		for i, x := range w {
			uni[x] = true
			nUni++
			if i > 0 {
				bi[w[i-1]+" "+x] = true
				nBi++
			}
		}
		if len(w) >= 3 {
			tri := map[string]bool{}
			repeated := 0
			for i := 2; i < len(w); i++ {
				k := w[i-2] + " " + w[i-1] + " " + w[i]
				if tri[k] {
					repeated++
				}
				tri[k] = true
			}
			rep += float64(repeated) / float64(len(w)-2)
			nRep++
		}
	}
	if nRep > 0 {
		s.Repetition = rep / float64(nRep)
	}
	if nUni > 0 {
		s.Distinct1 = float64(len(uni)) / float64(nUni)
	}
	if nBi > 0 {
		s.Distinct2 = float64(len(bi)) / float64(nBi)
	}
	s.Duplicates /= float64(len(completions))
	s.MeanLength = float64(nWords) / float64(len(completions))
	return s
}

// textState keeps the early and the recent batches' signals.
type textState struct {
	batches int
	early   []TextSignals
	recent  []TextSignals // ring of the last SamplesBaseline, oldest first
	latest  TextSignals
}

func meanSignals(b []TextSignals) TextSignals {
	var m TextSignals
	for _, s := range b {
		m.Repetition += s.Repetition
		m.Distinct1 += s.Distinct1
		m.Distinct2 += s.Distinct2
		m.Duplicates += s.Duplicates
		m.MeanLength += s.MeanLength
		m.Completions += s.Completions
	}
	n := float64(len(b))
	m.Repetition /= n
	m.Distinct1 /= n
	m.Distinct2 /= n
	m.Duplicates /= n
	m.MeanLength /= n
	return m
}

// ObserveSamples takes one batch of completions and returns the reward-hacking anomalies it
// raises. The rules compare the mean of the last SamplesBaseline batches with the mean of the
// first SamplesBaseline; they run once both windows are full and disjoint, and their cool-down
// counts batches.
func (m *Monitor) ObserveSamples(step int, samples []events.Sample) []events.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	texts := make([]string, 0, len(samples))
	for _, s := range samples {
		texts = append(texts, s.Completion)
	}
	sig := Signals(texts)
	if sig.Completions == 0 {
		return nil
	}
	th := &m.th
	t := &m.text
	t.batches++
	if len(t.early) < th.SamplesBaseline {
		t.early = append(t.early, sig)
	}
	t.recent = append(t.recent, sig)
	if len(t.recent) > th.SamplesBaseline {
		t.recent = t.recent[1:]
	}
	ready := t.batches >= 2*th.SamplesBaseline
	var early, recent TextSignals
	if ready {
		early, recent = meanSignals(t.early), meanSignals(t.recent)
		if early.MeanLength > 0 {
			sig.LengthDrift = recent.MeanLength/early.MeanLength - 1
		}
	}
	t.latest = sig

	var out []events.Event
	check := func(rule, metric, severity string, cond bool, v float64, msg func() string) {
		if m.latch(rule, metric).update(ready && cond, 1, th.CooldownSteps) {
			out = append(out, m.anomaly(step, rule, metric, severity, v, msg()))
		}
	}
	check(RuleRepetition, "completions/repetition", events.Warning, recent.Repetition >= th.RepetitionMax, recent.Repetition, func() string {
		return sprintf("completions repeat themselves: %.0f%% of their word trigrams are repeats over the last %d batches (threshold %.0f%%); a reward that pays for length or keywords is being gamed; add a repetition penalty or cap the length reward",
			100*recent.Repetition, th.SamplesBaseline, 100*th.RepetitionMax)
	})
	limit := th.DistinctDropFrac * early.Distinct2
	check(RuleDiversityDrop, "completions/distinct_2", events.Warning, recent.Distinct2 < limit, recent.Distinct2, func() string {
		return sprintf("completions lost diversity: distinct-2 %.3f is below %.0f%% of its early %.3f (%.3f); the policy is converging on one answer shape; raise temperature or beta, or check the reward for a shortcut",
			recent.Distinct2, 100*th.DistinctDropFrac, early.Distinct2, limit)
	})
	ratio := 1.0
	if early.MeanLength > 0 {
		ratio = recent.MeanLength / early.MeanLength
	}
	drift := ready && early.MeanLength > 0 && (ratio >= th.LengthDriftRatio || ratio <= 1/th.LengthDriftRatio)
	check(RuleLengthDrift, "completions/length_drift", events.Info, drift, ratio-1, func() string {
		// The value is the metric, recent/early − 1: the message leads with it in that unit.
		return sprintf("completion length drift %+.3f (recent/early − 1): %.1f words against an early %.1f, %.2f× (limits %.2f× and %.2f×); a reward that depends on length is shaping it; check that the length is what the task needs",
			ratio-1, recent.MeanLength, early.MeanLength, ratio, 1/th.LengthDriftRatio, th.LengthDriftRatio)
	})
	return out
}
