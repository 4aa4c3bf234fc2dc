package model

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"rlhfstation/internal/testref"
)

type procCase struct {
	Logits            []float32 `json:"logits"`
	Seen              []int     `json:"seen"`
	Temperature       float32   `json:"temperature"`
	TopK              int       `json:"top_k"`
	TopP              float32   `json:"top_p"`
	MinP              float32   `json:"min_p"`
	RepetitionPenalty float32   `json:"repetition_penalty"`
}

// TestLogitsProcMatchesTransformers: the distribution the backend samples from after the
// host's processing (softmax of the processed row over T) equals the one transformers'
// processors give (testdata/sampling_ref.py), for min_p and repetition_penalty alone, together,
// and with top-k and top-p, on rows with positive and negative logits of seen tokens.
func TestLogitsProcMatchesTransformers(t *testing.T) {
	py := testref.Python(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var cases []procCase
	for _, o := range []struct {
		t, topP, minP, pen float32
		topK               int
	}{
		{1, 0, 0.1, 1, 0}, {0.7, 0, 0.05, 1, 0}, {1, 0, 0, 1.3, 0}, {1, 0, 0, 0.8, 0},
		{0.9, 0, 0.08, 1.5, 0}, {1.2, 0.9, 0.05, 1.2, 0}, {1, 0.8, 0.2, 1.1, 12}, {0.6, 0, 0.02, 2, 20},
		{1, 0.95, 0.3, 1, 0}, {1, 0, 1, 1.3, 0},
	} {
		c := procCase{Logits: make([]float32, 40), Temperature: o.t, TopK: o.topK, TopP: o.topP, MinP: o.minP, RepetitionPenalty: o.pen}
		for j := range c.Logits {
			c.Logits[j] = float32(rng.NormFloat64() * 2)
		}
		for range 12 { // repeats included: each token is penalised once
			c.Seen = append(c.Seen, rng.IntN(40))
		}
		cases = append(cases, c)
	}
	in, _ := json.Marshal(cases)
	cmd := exec.Command(py, filepath.Join("testdata", "sampling_ref.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sampling_ref.py: %v\n%s", err, stderr.String())
	}
	var want [][]float64
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	var p logitsProc
	for i, c := range cases {
		row := slices.Clone(c.Logits)
		o := GenerateOptions{Temperature: c.Temperature, TopK: c.TopK, TopP: c.TopP, MinP: c.MinP, RepetitionPenalty: c.RepetitionPenalty}
		p.apply(row, c.Seen, &o)
		got := softmaxT(row, c.Temperature)
		kept := 0
		for j := range got {
			if math.Abs(got[j]-want[i][j]) > 1e-6 {
				t.Errorf("case %d %+v: p[%d] = %g, transformers %g", i, o, j, got[j], want[i][j])
			}
			if want[i][j] > 0 {
				kept++
			}
		}
		if c.MinP > 0 && kept == len(got) {
			t.Errorf("case %d: min_p %g kept every token: the case tests nothing", i, c.MinP)
		}
	}
}

// TestGenerateMinPRepetitionPenalty: Generate with min_p and repetition_penalty draws every
// token from the set the processed row keeps (checked on the raw logits OnLogits shows, with
// the sequence's tokens so far), reports log-probs of softmax(raw/T) as without them, and the
// options change what is sampled; greedy with a penalty picks the penalised argmax.
func TestGenerateMinPRepetitionPenalty(t *testing.T) {
	m := randomModel(t, tinyConfigs()["llama-gqa"], 3)
	prompts := [][]int{{1, 2, 3, 2}, {5, 6}}
	for _, o := range []GenerateOptions{
		{MaxNewTokens: 16, Temperature: 1, MinP: 0.2, RepetitionPenalty: 1.5, Seed: 5, NoEOS: true},
		{MaxNewTokens: 16, Temperature: 0.8, TopK: 8, TopP: 0.9, MinP: 0.1, RepetitionPenalty: 1.3, Seed: 6, NoEOS: true},
		{MaxNewTokens: 16, RepetitionPenalty: 3, NoEOS: true},
		{MaxNewTokens: 16, Temperature: 1, MinP: 0.2, RepetitionPenalty: 1.5, Seed: 5, NoEOS: true, Eager: true}, // every draw outside a graph
	} {
		var raws [][][]float32 // [seq][step] raw logits
		raws = make([][][]float32, len(prompts))
		o.OnLogits = func(seq, step int, logits []float32) { raws[seq] = append(raws[seq], slices.Clone(logits)) }
		g, err := m.Generate(prompts, o)
		if err != nil {
			t.Fatal(err)
		}
		plain := o
		plain.MinP, plain.RepetitionPenalty, plain.OnLogits = 0, 0, nil
		base, _ := m.Generate(prompts, plain)
		same := true
		for i := range prompts {
			same = same && slices.Equal(base.Tokens[i], g.Tokens[i])
			for s, tok := range g.Tokens[i] {
				raw := raws[i][s]
				row := slices.Clone(raw)
				seen := append(slices.Clone(prompts[i]), g.Tokens[i][:s]...)
				var p logitsProc
				p.apply(row, seen, &o)
				if o.Temperature == 0 {
					if want := argmaxF(row); tok != want {
						t.Errorf("%+v seq %d step %d: greedy %d, penalised argmax %d", o, i, s, tok, want)
					}
				} else if math.IsInf(float64(row[tok]), -1) {
					t.Errorf("%+v seq %d step %d: sampled %d, outside the kept set", o, i, s, tok)
				}
				if want := logSoftmaxAt(raw, tok, o.Temperature); math.Abs(float64(g.LogProbs[i][s]-want)) > 1e-5 {
					t.Errorf("seq %d step %d: log-prob %g, softmax(raw/T) %g", i, s, g.LogProbs[i][s], want)
				}
			}
		}
		if same {
			t.Errorf("%+v: the same tokens as without min_p and repetition_penalty", o)
		}
	}
}

func argmaxF(x []float32) int {
	best := 0
	for j, v := range x {
		if v > x[best] {
			best = j
		}
	}
	return best
}

// logitsProc is the tests' reference for min_p and repetition_penalty, written on the host
// from Hugging Face transformers' semantics and order (itself checked against transformers
// by TestLogitsProcMatchesTransformers; the backends apply them in SampleInto): the
// repetition penalty on the raw logits, then temperature, top-k, top-p and min-p. It leaves
// in each row the penalised logits with every token outside the kept set at −inf: softmax of
// the row over T is the distribution a draw must follow.
type logitsProc struct {
	idx []int
	s   []float64
}

// apply rewrites row in place: seen are the tokens already in the prompt and completion.
// Greedy decoding (temperature 0) takes the penalty only, as transformers' warpers apply to
// sampling only.
func (p *logitsProc) apply(row []float32, seen []int, o *GenerateOptions) {
	if pen := o.RepetitionPenalty; pen > 0 && pen != 1 {
		// Each token once, from its raw value (transformers gathers, then scatters).
		done := map[int]bool{}
		for _, t := range seen {
			if t < 0 || t >= len(row) || done[t] {
				continue
			}
			done[t] = true
			if row[t] < 0 {
				row[t] *= pen
			} else {
				row[t] /= pen
			}
		}
	}
	if o.Temperature == 0 {
		return
	}
	V := len(row)
	if cap(p.s) < V {
		p.s, p.idx = make([]float64, V), make([]int, V)
	}
	s, idx := p.s[:V], p.idx[:V]
	top := math.Inf(-1)
	for j, v := range row {
		s[j] = float64(v) / float64(o.Temperature)
		top = math.Max(top, s[j])
	}
	k := o.TopK
	if k <= 0 || k > V {
		k = V
	}
	usesTopP := o.TopP > 0 && o.TopP < 1
	if k == V && !usesTopP { // min-p alone: a threshold, no ordering needed
		for j := range row {
			if math.Exp(s[j]-top) < float64(o.MinP) {
				row[j] = float32(math.Inf(-1))
			}
		}
		return
	}
	for j := range idx {
		idx[j] = j
	}
	// Decreasing probability, lowest id first among equals (the backend's order).
	sort.Slice(idx, func(a, b int) bool {
		if s[idx[a]] != s[idx[b]] {
			return s[idx[a]] > s[idx[b]]
		}
		return idx[a] < idx[b]
	})
	n := k
	if usesTopP {
		var z float64
		for _, j := range idx[:k] {
			z += math.Exp(s[j] - top)
		}
		var c float64
		for i, j := range idx[:k] {
			c += math.Exp(s[j]-top) / z
			if c >= float64(o.TopP) {
				n = i + 1
				break
			}
		}
	}
	// min-p over the tokens top-k and top-p kept: p/p_max is unchanged by renormalising.
	for n > 1 && math.Exp(s[idx[n-1]]-top) < float64(o.MinP) {
		n--
	}
	for _, j := range idx[n:] {
		row[j] = float32(math.Inf(-1))
	}
}

// logSoftmaxAt is log softmax(row/T)[tok] (T = 1 when 0), in float64.
func logSoftmaxAt(row []float32, tok int, temperature float32) float32 {
	t := float64(temperature)
	if t == 0 {
		t = 1
	}
	top := math.Inf(-1)
	for _, v := range row {
		top = math.Max(top, float64(v)/t)
	}
	var z float64
	for _, v := range row {
		z += math.Exp(float64(v)/t - top)
	}
	return float32(float64(row[tok])/t - top - math.Log(z))
}
