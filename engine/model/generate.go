package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"rlhfstation/engine/backend/cpu"
)

// GenerateOptions controls Generate.
type GenerateOptions struct {
	MaxNewTokens int
	Temperature  float32 // 0: greedy (argmax, lowest id on ties)
	TopK         int     // keep the K most likely tokens; 0: all
	TopP         float32 // keep the smallest set whose probability reaches P; 0 or ≥1: all
	// Sequence i samples from its own PCG generator seeded (Seed, Stream+i), so a batch
	// gives each sequence the tokens it would get alone with Stream+i. A trainer draws Seed
	// from a generator of its own whose state it saves with its checkpoints.
	Seed, Stream uint64
	StopIDs      []int // stop tokens besides the config's EOS ids (the stop token is kept)
	NoEOS        bool  // ignore the config's EOS ids
	// OnLogits, when set, sees the raw logits (before temperature) that each new token of
	// sequence seq is drawn from, step counting from 0. The slice is reused afterwards.
	OnLogits func(seq, step int, logits []float32)
}

// Generation is what Generate returns, per sequence.
type Generation struct {
	Tokens [][]int // new tokens, a stop token included
	// LogProbs[i][t] = log p(Tokens[i][t]) under softmax(logits/Temperature) over the whole
	// vocabulary (before top-k/top-p truncation; under T=1 when greedy): the distribution
	// that GRPO's log-probs use.
	LogProbs [][]float32
	Cut      []bool // ended by MaxNewTokens or the context, not by a stop token
}

// Generate continues each prompt, batched over a key/value cache: one prefill of all
// prompts, then one decode step per new token for the sequences still running.
func (m *Model) Generate(prompts [][]int, o GenerateOptions) (*Generation, error) {
	B, V := len(prompts), m.Config.Vocab
	if o.MaxNewTokens < 0 || o.Temperature < 0 || o.TopK < 0 || o.TopP < 0 {
		return nil, fmt.Errorf("generate: negative option (max new tokens %d, temperature %g, top-k %d, top-p %g)",
			o.MaxNewTokens, o.Temperature, o.TopK, o.TopP)
	}
	g := &Generation{Tokens: make([][]int, B), LogProbs: make([][]float32, B), Cut: make([]bool, B)}
	limit := make([]int, B)
	capacity := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("generate: prompt %d is empty", i)
		}
		if len(p) > m.Config.MaxPos {
			return nil, fmt.Errorf("generate: prompt %d has %d tokens, more than the model's context of %d", i, len(p), m.Config.MaxPos)
		}
		limit[i] = min(o.MaxNewTokens, m.Config.MaxPos-len(p))
		capacity = max(capacity, len(p)+limit[i])
	}
	stop := slices.Clone(o.StopIDs)
	if !o.NoEOS {
		stop = append(stop, m.Config.EOS...)
	}
	rngs := make([]*rand.Rand, B)
	samplers := make([]sampler, B)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(o.Seed, o.Stream+uint64(i)))
		samplers[i] = newSampler(V)
	}
	cache := m.NewCache(B, capacity)
	feed := make([][]int, B)
	active := 0
	for i, p := range prompts {
		if limit[i] > 0 {
			feed[i] = p
			active++
		} else {
			g.Cut[i] = true
		}
	}
	for step := 0; active > 0; step++ {
		var logits []float32
		var err error
		if step == 0 {
			logits, err = m.prefill(cache, feed)
		} else {
			logits, err = m.Forward(cache, feed, true)
		}
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		for i := range feed {
			if len(feed[i]) == 0 {
				continue
			}
			row := logits[i*V : (i+1)*V]
			if o.OnLogits != nil {
				o.OnLogits(i, step, row)
			}
			tok, lp := samplers[i].sample(row, o, rngs[i])
			g.Tokens[i] = append(g.Tokens[i], tok)
			g.LogProbs[i] = append(g.LogProbs[i], lp)
			switch {
			case slices.Contains(stop, tok):
				feed[i] = nil
			case len(g.Tokens[i]) >= limit[i]:
				feed[i], g.Cut[i] = nil, true
			default:
				feed[i] = []int{tok}
			}
			if feed[i] == nil {
				active--
			}
		}
	}
	return g, nil
}

// sampler draws one token from a row of logits; its buffers are reused across steps.
type sampler struct {
	logp []float32
	idx  []int
	prob []float64
}

func newSampler(vocab int) sampler {
	return sampler{logp: make([]float32, vocab)}
}

// sample returns a token and its log-probability under softmax(logits/T) (T=1 when
// greedy). Temperature, then top-k, then top-p over the top-k renormalised, as Hugging
// Face's logits warpers apply them.
func (s *sampler) sample(logits []float32, o GenerateOptions, rng *rand.Rand) (int, float32) {
	if o.Temperature == 0 {
		best := 0
		for j, v := range logits {
			if v > logits[best] {
				best = j
			}
		}
		cpu.LogSoftmax(s.logp, logits, 1)
		return best, s.logp[best]
	}
	cpu.LogSoftmax(s.logp, logits, 1/o.Temperature)
	V := len(logits)
	k := o.TopK
	if k <= 0 || k > V {
		k = V
	}
	topP := o.TopP > 0 && o.TopP < 1
	if k == V && !topP {
		u := rng.Float64()
		var c float64
		for j, lp := range s.logp {
			c += math.Exp(float64(lp))
			if u < c {
				return j, lp
			}
		}
		return argmax(s.logp), s.logp[argmax(s.logp)]
	}
	// Candidates in order of decreasing probability (lowest id first among equals).
	s.idx = s.idx[:0]
	for j := 0; j < V; j++ {
		s.idx = append(s.idx, j)
	}
	lp := s.logp
	less := func(a, b int) bool {
		if lp[a] != lp[b] {
			return lp[a] > lp[b]
		}
		return a < b
	}
	if k < V {
		selectTop(s.idx, k, less)
		s.idx = s.idx[:k]
	}
	sort.Slice(s.idx, func(a, b int) bool { return less(s.idx[a], s.idx[b]) })
	s.prob = s.prob[:0]
	var total float64
	for _, j := range s.idx {
		p := math.Exp(float64(lp[j]))
		s.prob = append(s.prob, p)
		total += p
	}
	n := len(s.idx)
	if topP {
		var c float64
		for i, p := range s.prob {
			c += p / total
			if c >= float64(o.TopP) {
				n = i + 1
				break
			}
		}
	}
	var kept float64
	for _, p := range s.prob[:n] {
		kept += p
	}
	u := rng.Float64() * kept
	var c float64
	for i, p := range s.prob[:n] {
		c += p
		if u < c {
			return s.idx[i], lp[s.idx[i]]
		}
	}
	return s.idx[n-1], lp[s.idx[n-1]]
}

func argmax(x []float32) int {
	best := 0
	for j, v := range x {
		if v > x[best] {
			best = j
		}
	}
	return best
}

// selectTop reorders idx so that its first k entries are the k smallest under less
// (quickselect; the order within them is left to the caller).
func selectTop(idx []int, k int, less func(a, b int) bool) {
	lo, hi := 0, len(idx)-1
	for lo < hi {
		pivot := idx[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for less(idx[i], pivot) {
				i++
			}
			for less(pivot, idx[j]) {
				j--
			}
			if i <= j {
				idx[i], idx[j] = idx[j], idx[i]
				i++
				j--
			}
		}
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return
		}
	}
}

// prefill runs the prompts through the cache in groups of at most maxPassRows tokens, so
// that the activations of a large batch of long prompts need not exist all at once, and
// returns the last logits of each sequence as Forward(cache, prompts, true) does.
func (m *Model) prefill(cache *Cache, prompts [][]int) ([]float32, error) {
	V := m.Config.Vocab
	out := make([]float32, len(prompts)*V)
	group := make([][]int, len(prompts))
	for lo := 0; lo < len(prompts); {
		clear(group)
		hi, rows := lo, 0
		for hi < len(prompts) && (rows == 0 || rows+len(prompts[hi]) <= maxPassRows) {
			group[hi] = prompts[hi]
			rows += len(prompts[hi])
			hi++
		}
		logits, err := m.Forward(cache, group, true)
		if err != nil {
			return nil, err
		}
		copy(out[lo*V:hi*V], logits[lo*V:hi*V])
		lo = hi
	}
	return out, nil
}
