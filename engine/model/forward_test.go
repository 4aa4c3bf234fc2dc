package model

import (
	"math/rand/v2"
	"slices"
	"testing"

	"rlhfstation/safetensors"
)

// refCase is one model checked against the PyTorch reference.
type refCase struct {
	name string
	m    *Model // as loaded back from dir
	dir  string
	seqs [][]int
	gen  []int
}

func refCases(t *testing.T) []refCase {
	var cases []refCase
	for i, name := range sortedNames(tinyConfigs()) {
		c := tinyConfigs()[name]
		dtypes := []safetensors.DType{safetensors.F32}
		if name == "llama-gqa" {
			dtypes = append(dtypes, safetensors.BF16)
		}
		if name == "gpt2-tied" {
			dtypes = append(dtypes, safetensors.F16)
		}
		for _, dt := range dtypes {
			dir := saveAs(t, randomModel(t, c, uint64(i+1)), dt)
			m, err := Load(dir)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			cases = append(cases, refCase{name: name + "/" + string(dt), m: m, dir: dir,
				seqs: [][]int{randomIDs(rng, 16, c.Vocab), randomIDs(rng, 11, c.Vocab), randomIDs(rng, 3, c.Vocab)},
				gen:  randomIDs(rng, 6, c.Vocab)})
		}
	}
	return cases
}

// TestLogitsMatchReference checks every position's logits against PyTorch, through a
// batched prefill and through token-by-token decoding over the cache, and greedy
// generation token for token.
func TestLogitsMatchReference(t *testing.T) {
	cases := refCases(t)
	var jobs []refJob
	for _, c := range cases {
		jobs = append(jobs, refJob{Model: c.dir, Seqs: c.seqs, Greedy: &refGreedy{Prompt: c.gen, N: 32}})
	}
	results := runReference(t, jobs)
	const tol = 1e-4
	for ci, c := range cases {
		ref := results[ci]
		V := c.m.Config.Vocab
		// batched prefill of all sequences, every position
		cache := c.m.NewCache(len(c.seqs), 64)
		all, err := c.m.Forward(cache, c.seqs, false, AdaptersOn)
		if err != nil {
			t.Fatal(err)
		}
		all = slices.Clone(all)
		row, worst := 0, 0.0
		for s, seq := range c.seqs {
			for i := range seq {
				worst = max(worst, relErr(all[row*V:(row+1)*V], ref.Logits[s][i]))
				row++
			}
		}
		// split prefill then decode one token at a time, sequences in one batch
		cache = c.m.NewCache(len(c.seqs), 64)
		first := make([][]int, len(c.seqs))
		for s, seq := range c.seqs {
			first[s] = seq[:2]
		}
		if _, err := c.m.Forward(cache, first, true, AdaptersOn); err != nil {
			t.Fatal(err)
		}
		for i := 2; i < 16; i++ {
			step := make([][]int, len(c.seqs))
			for s, seq := range c.seqs {
				if i < len(seq) {
					step[s] = seq[i : i+1]
				}
			}
			last, err := c.m.Forward(cache, step, true, AdaptersOn)
			if err != nil {
				t.Fatal(err)
			}
			for s, seq := range c.seqs {
				if i < len(seq) {
					worst = max(worst, relErr(last[s*V:(s+1)*V], ref.Logits[s][i]))
				}
			}
		}
		if worst > tol {
			t.Errorf("%s: logits differ from PyTorch by %.2g relative (tolerance %g)", c.name, worst, tol)
		} else {
			t.Logf("%s: max relative logit error %.2g", c.name, worst)
		}
		g, err := c.m.Generate([][]int{c.gen}, GenerateOptions{MaxNewTokens: 32, NoEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(g.Tokens[0], ref.Greedy) {
			t.Errorf("%s: greedy tokens\n got %v\nwant %v", c.name, g.Tokens[0], ref.Greedy)
		}
	}
}
