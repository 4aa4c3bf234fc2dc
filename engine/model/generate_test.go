package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"slices"
	"testing"
)

// TestBatchedGenerationMatchesAlone: a batch of prompts of different lengths gives each
// sequence the tokens (and log-probs) it gets alone, greedy and sampled.
func TestBatchedGenerationMatchesAlone(t *testing.T) {
	for _, name := range []string{"llama-gqa", "gpt2-tied"} {
		m := randomModel(t, tinyConfigs()[name], 3)
		rng := rand.New(rand.NewPCG(1, 2))
		prompts := [][]int{randomIDs(rng, 5, m.Config.Vocab), randomIDs(rng, 9, m.Config.Vocab), randomIDs(rng, 1, m.Config.Vocab)}
		for _, o := range []GenerateOptions{
			{MaxNewTokens: 20, NoEOS: true},
			{MaxNewTokens: 20, Temperature: 0.9, TopK: 20, TopP: 0.9, Seed: 42, NoEOS: true},
			{MaxNewTokens: 20, Temperature: 1.3, Seed: 7, Stream: 5, StopIDs: []int{3, 4, 5}},
		} {
			batch, err := m.Generate(prompts, o)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				alone := o
				alone.Stream = o.Stream + uint64(i)
				g, err := m.Generate([][]int{p}, alone)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(g.Tokens[0], batch.Tokens[i]) || g.Cut[0] != batch.Cut[i] {
					t.Errorf("%s %+v seq %d: batched %v (cut %v), alone %v (cut %v)", name, o, i, batch.Tokens[i], batch.Cut[i], g.Tokens[0], g.Cut[0])
					continue
				}
				for j := range g.LogProbs[0] {
					if d := math.Abs(float64(g.LogProbs[0][j] - batch.LogProbs[i][j])); d > 1e-5 {
						t.Errorf("%s seq %d token %d: log-prob %g batched, %g alone", name, i, j, batch.LogProbs[i][j], g.LogProbs[0][j])
					}
				}
			}
		}
	}
}

// TestGroupedPassesMatch: prefill and log-probs split into several passes give the same
// results as one pass.
func TestGroupedPassesMatch(t *testing.T) {
	m := randomModel(t, tinyConfigs()["llama-gqa"], 6)
	rng := rand.New(rand.NewPCG(6, 6))
	prompts := [][]int{randomIDs(rng, 5, m.Config.Vocab), randomIDs(rng, 9, m.Config.Vocab), randomIDs(rng, 1, m.Config.Vocab), randomIDs(rng, 4, m.Config.Vocab)}
	o := GenerateOptions{MaxNewTokens: 10, Temperature: 0.8, Seed: 3, NoEOS: true}
	one, _ := m.Generate(prompts, o)
	lp1, _ := m.LogProbs(prompts, 1, AdaptersOn)
	saved := maxPassRows
	maxPassRows = 6
	defer func() { maxPassRows = saved }()
	split, _ := m.Generate(prompts, o)
	lp2, _ := m.LogProbs(prompts, 1, AdaptersOn)
	for i := range prompts {
		if !slices.Equal(one.Tokens[i], split.Tokens[i]) {
			t.Errorf("seq %d: %v in one prefill, %v in groups", i, one.Tokens[i], split.Tokens[i])
		}
		for j := range lp1[i] {
			if math.Abs(float64(lp1[i][j]-lp2[i][j])) > 1e-5 {
				t.Errorf("seq %d token %d: log-prob %g vs %g", i, j, lp1[i][j], lp2[i][j])
			}
		}
	}
}

func TestGenerationSeededAndStops(t *testing.T) {
	m := randomModel(t, tinyConfigs()["qwen2-bias"], 5)
	prompts := [][]int{{1, 2, 3}, {4, 5, 6, 7}}
	o := GenerateOptions{MaxNewTokens: 24, Temperature: 1, Seed: 9}
	a, err := m.Generate(prompts, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Generate(prompts, o)
	o.Seed = 10
	c, _ := m.Generate(prompts, o)
	if !slices.Equal(a.Tokens[0], b.Tokens[0]) || !slices.Equal(a.Tokens[1], b.Tokens[1]) {
		t.Fatal("same seed gave different tokens")
	}
	if slices.Equal(a.Tokens[0], c.Tokens[0]) && slices.Equal(a.Tokens[1], c.Tokens[1]) {
		t.Fatal("another seed gave the same tokens")
	}
	// Stop tokens end a sequence (kept as its last token); otherwise it is cut at the limit.
	for i, toks := range a.Tokens {
		stopAt := slices.IndexFunc(toks, func(id int) bool { return slices.Contains(m.Config.EOS, id) })
		switch {
		case stopAt >= 0 && (stopAt != len(toks)-1 || a.Cut[i]):
			t.Errorf("seq %d: stop token at %d of %d, cut %v", i, stopAt, len(toks), a.Cut[i])
		case stopAt < 0 && (len(toks) != 24 || !a.Cut[i]):
			t.Errorf("seq %d: %d tokens without a stop, cut %v", i, len(toks), a.Cut[i])
		}
	}
	// Force a stop: every token id is a stop id.
	all := make([]int, m.Config.Vocab)
	for i := range all {
		all[i] = i
	}
	g, _ := m.Generate(prompts, GenerateOptions{MaxNewTokens: 5, StopIDs: all})
	if len(g.Tokens[0]) != 1 || g.Cut[0] {
		t.Errorf("stop ids: got %v cut %v", g.Tokens[0], g.Cut[0])
	}
	// The context bounds the new tokens.
	long := make([]int, m.Config.MaxPos-2)
	g, err = m.Generate([][]int{long}, GenerateOptions{MaxNewTokens: 10, NoEOS: true})
	if err != nil || len(g.Tokens[0]) != 2 || !g.Cut[0] {
		t.Errorf("near the context: %v %v %v", g.Tokens[0], g.Cut[0], err)
	}
}

// TestSamplerDistribution checks temperature, top-k and top-p against the probabilities
// they should sample from, by counting draws on fixed logits (the backend's Sample, as
// Generate calls it: one row per draw, each with its uniform).
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{2, 1, 0.5, 0.5, -1, 3}
	const n = 200000
	for _, o := range []GenerateOptions{
		{Temperature: 1},
		{Temperature: 0.5, TopK: 3},
		{Temperature: 1, TopP: 0.8},
		{Temperature: 2, TopK: 4, TopP: 0.7},
	} {
		want := expectedDist(logits, o)
		rng := rand.New(rand.NewPCG(1, 1))
		counts := make([]float64, len(logits))
		rows, u := make([]float32, 0, n*len(logits)), make([]float64, n)
		for i := 0; i < n; i++ {
			rows, u[i] = append(rows, logits...), rng.Float64()
		}
		toks, lps, err := cpu.New().Sample(backend.HostF32(rows), u, n, len(logits), o.Temperature, o.TopK, o.TopP)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			tok, lp := toks[i], lps[i]
			counts[tok]++
			full := math.Log(softmaxT(logits, o.Temperature)[tok])
			if math.Abs(float64(lp)-full) > 1e-5 {
				t.Fatalf("%+v: log-prob %g, want %g", o, lp, full)
			}
		}
		for j := range counts {
			if got := counts[j] / n; math.Abs(got-want[j]) > 0.005 {
				t.Errorf("%+v token %d: frequency %.4f, want %.4f", o, j, got, want[j])
			}
		}
	}
}

func softmaxT(x []float32, temp float32) []float64 {
	p := make([]float64, len(x))
	var s float64
	for j, v := range x {
		p[j] = math.Exp(float64(v / temp))
		s += p[j]
	}
	for j := range p {
		p[j] /= s
	}
	return p
}

// expectedDist is the sampling distribution written out directly: sort, cut at k, cut
// where the cumulative probability reaches p, renormalise.
func expectedDist(logits []float32, o GenerateOptions) []float64 {
	p := softmaxT(logits, o.Temperature)
	order := make([]int, len(p))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case p[a] > p[b]:
			return -1
		case p[a] < p[b]:
			return 1
		}
		return 0
	})
	if o.TopK > 0 {
		order = order[:o.TopK]
	}
	var total float64
	for _, j := range order {
		total += p[j]
	}
	if o.TopP > 0 && o.TopP < 1 {
		var c float64
		for i, j := range order {
			c += p[j] / total
			if c >= float64(o.TopP) {
				order = order[:i+1]
				break
			}
		}
	}
	out := make([]float64, len(p))
	var kept float64
	for _, j := range order {
		kept += p[j]
	}
	for _, j := range order {
		out[j] = p[j] / kept
	}
	return out
}

// TestLogProbsMatchForward: LogProbs (chunked head, no cache) agrees with log-softmax of
// Forward's logits, and with temperature.
func TestLogProbsMatchForward(t *testing.T) {
	m := randomModel(t, tinyConfigs()["llama-gqa"], 4)
	rng := rand.New(rand.NewPCG(3, 3))
	seqs := [][]int{randomIDs(rng, 20, m.Config.Vocab), randomIDs(rng, 1, m.Config.Vocab), randomIDs(rng, 7, m.Config.Vocab)}
	for _, temp := range []float32{0, 0.7} {
		lp, err := m.LogProbs(seqs, temp, AdaptersOn)
		if err != nil {
			t.Fatal(err)
		}
		V := m.Config.Vocab
		for s, seq := range seqs {
			cache := m.NewCache(1, 64)
			logits, err := m.Forward(cache, [][]int{seq}, false, AdaptersOn)
			if err != nil {
				t.Fatal(err)
			}
			if lp[s][0] != 0 || len(lp[s]) != len(seq) {
				t.Fatalf("seq %d: %d log-probs, first %g", s, len(lp[s]), lp[s][0])
			}
			for i := 1; i < len(seq); i++ {
				want := math.Log(softmaxT(logits[(i-1)*V:i*V], max(temp, 1e-9)+boolF(temp == 0))[seq[i]])
				if math.Abs(float64(lp[s][i])-want) > 1e-4 {
					t.Errorf("T=%g seq %d token %d: %g, want %g", temp, s, i, lp[s][i], want)
				}
			}
		}
	}
}

func boolF(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// TestGenerateOnContinuesTheCache: an episode's second turn on the cache its first turn left
// (the turn's last token and the appended environment tokens prefilled onto it) gives the
// tokens and log-probs of a fresh Generate over the whole history, with the same seed, while
// prefilling only the new tokens; a slot whose history changed is prefilled again from the
// first difference.
func TestGenerateOnContinuesTheCache(t *testing.T) {
	for _, name := range []string{"llama-gqa", "qwen2-bias"} {
		m := randomModel(t, tinyConfigs()[name], 4)
		rng := rand.New(rand.NewPCG(4, 4))
		for _, o := range []GenerateOptions{
			{MaxNewTokens: 8, NoEOS: true},
			{MaxNewTokens: 8, Temperature: 0.9, TopK: 20, Seed: 11, NoEOS: true},
			{MaxNewTokens: 8, Temperature: 1.1, MinP: 0.05, RepetitionPenalty: 1.3, Seed: 12, NoEOS: true},
		} {
			prompts := [][]int{randomIDs(rng, 5, m.Config.Vocab), randomIDs(rng, 9, m.Config.Vocab), randomIDs(rng, 3, m.Config.Vocab)}
			c := m.NewCache(len(prompts), 64)
			first, err := m.GenerateOn(c, []int{0, 1, 2}, prompts, o)
			if err != nil {
				t.Fatal(err)
			}
			if want := 5 + 9 + 3; first.Prefilled != want {
				t.Errorf("first turn prefilled %d tokens, want %d", first.Prefilled, want)
			}
			// The second turn: sequences 2 and 0 (1 is done), each history with 4 environment
			// tokens appended; the generators as a fresh batch of those two would have them.
			var hist [][]int
			for _, s := range []int{2, 0} {
				h := append(append(slices.Clone(prompts[s]), first.Tokens[s]...), randomIDs(rng, 4, m.Config.Vocab)...)
				hist = append(hist, h)
			}
			o2 := o
			o2.Stream = 1 << 32
			cont, err := m.GenerateOn(c, []int{2, 0}, hist, o2)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := m.Generate(hist, o2)
			if err != nil {
				t.Fatal(err)
			}
			if want := 2 * (1 + 4); cont.Prefilled != want || fresh.Prefilled != len(hist[0])+len(hist[1]) {
				t.Errorf("prefilled %d tokens on the cache (want %d), %d afresh (want %d)", cont.Prefilled, want, fresh.Prefilled, len(hist[0])+len(hist[1]))
			}
			sameGeneration(t, fmt.Sprintf("%s %+v", name, o), cont, fresh)

			// A history that differs from what slot 2 holds at token 6: prefilled from there.
			hist[0][6]++
			hist[0][6] %= m.Config.Vocab
			again, err := m.GenerateOn(c, []int{2}, hist[:1], o2)
			if err != nil {
				t.Fatal(err)
			}
			fresh, _ = m.Generate(hist[:1], o2)
			if want := len(hist[0]) - 6; again.Prefilled != want {
				t.Errorf("a changed history prefilled %d tokens, want %d", again.Prefilled, want)
			}
			sameGeneration(t, fmt.Sprintf("%s %+v, changed history", name, o), again, fresh)
			c.Free()
		}
	}
}

func sameGeneration(t *testing.T, what string, got, want *Generation) {
	t.Helper()
	for i := range want.Tokens {
		if !slices.Equal(got.Tokens[i], want.Tokens[i]) || got.Cut[i] != want.Cut[i] {
			t.Errorf("%s seq %d: %v (cut %v) on the cache, %v (cut %v) afresh", what, i, got.Tokens[i], got.Cut[i], want.Tokens[i], want.Cut[i])
			continue
		}
		for j := range want.LogProbs[i] {
			if d := math.Abs(float64(got.LogProbs[i][j] - want.LogProbs[i][j])); d > 1e-5 {
				t.Errorf("%s seq %d token %d: log-prob %g on the cache, %g afresh", what, i, j, got.LogProbs[i][j], want.LogProbs[i][j])
			}
		}
	}
}
