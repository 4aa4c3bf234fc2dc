package model

import (
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/lora"
)

// familyTiny are small config.json files of the families that differ from llama in their
// maths, written as each family writes them, with the features turned up so they show: a
// query width other than the hidden size, soft-capping caps small enough that tanh bends,
// sliding windows shorter than the sequences, a local and a global RoPE base, a partial
// rotary head with longrope factors.
func familyTiny() map[string]map[string]any {
	return map[string]map[string]any{
		"qwen3": {"model_type": "qwen3", "vocab_size": 150, "hidden_size": 32, "intermediate_size": 64,
			"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
			"max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
			"attention_bias": false, "use_sliding_window": false, "hidden_act": "silu", "eos_token_id": 5},
		"qwen3-bias": {"model_type": "qwen3", "vocab_size": 120, "hidden_size": 24, "intermediate_size": 40,
			"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
			"max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false,
			"attention_bias": true, "hidden_act": "silu"},
		"gemma": {"model_type": "gemma", "vocab_size": 140, "hidden_size": 32, "intermediate_size": 64,
			"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
			"max_position_embeddings": 64, "hidden_act": "gelu", "bos_token_id": 2, "eos_token_id": 1},
		"gemma2": {"model_type": "gemma2", "vocab_size": 140, "hidden_size": 32, "intermediate_size": 64,
			"num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
			"max_position_embeddings": 64, "query_pre_attn_scalar": 12, "attn_logit_softcapping": 1.5,
			"final_logit_softcapping": 2.0, "sliding_window": 5, "hidden_activation": "gelu_pytorch_tanh"},
		"gemma3_text": {"model_type": "gemma3_text", "vocab_size": 140, "hidden_size": 32, "intermediate_size": 64,
			"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
			"max_position_embeddings": 64, "query_pre_attn_scalar": 8, "sliding_window": 4, "sliding_window_pattern": 3,
			"rope_local_base_freq": 100.0, "rope_theta": 10000.0, "rope_scaling": map[string]any{"rope_type": "linear", "factor": 4.0},
			"attn_logit_softcapping": nil, "final_logit_softcapping": nil},
		"phi3": {"model_type": "phi3", "vocab_size": 130, "hidden_size": 64, "intermediate_size": 48,
			"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
			"original_max_position_embeddings": 48, "partial_rotary_factor": 0.75, "sliding_window": 7,
			"rope_scaling": map[string]any{"type": "longrope", "short_factor": []any{1.0, 1.1, 1.3, 1.6, 2.0, 2.5},
				"long_factor": []any{2.0, 2.0, 2.0, 2.0, 2.0, 2.0}},
			"tie_word_embeddings": true, "rms_norm_eps": 1e-5, "hidden_act": "silu"},
		"smollm3": {"model_type": "smollm3", "vocab_size": 120, "hidden_size": 32, "intermediate_size": 48,
			"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
			"rope_theta": 5000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "no_rope_layer_interval": 2,
			"no_rope_layers": nil, "use_sliding_window": false, "attention_bias": false, "mlp_bias": false},
		"olmo2": {"model_type": "olmo2", "vocab_size": 130, "hidden_size": 32, "intermediate_size": 48,
			"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
			"rope_theta": 500000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "attention_bias": false,
			"hidden_act": "silu"},
		"phi3-mini": {"model_type": "phi3", "vocab_size": 110, "hidden_size": 32, "intermediate_size": 40,
			"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 64,
			"original_max_position_embeddings": 64, "sliding_window": 63, "rope_scaling": nil, "tie_word_embeddings": false},
	}
}

// famCase is one family model in one storage type, made by the reference.
type famCase struct {
	name, dir string
	seqs      [][]int
	gen       []int
	dlogp     [][]float32
	temp      float32
}

// famCases lays out every family in F32 and BF16 with random sequences, loss weights and the
// reference jobs that make each model and compute its logits, greedy continuation and
// gradients.
func famCases(t *testing.T) ([]famCase, []refJob) {
	var cases []famCase
	var jobs []refJob
	for i, name := range slices.Sorted(maps.Keys(familyTiny())) {
		cfg := familyTiny()[name]
		for _, dt := range []string{"F32", "BF16"} {
			dir := filepath.Join(t.TempDir(), name)
			rng := rand.New(rand.NewPCG(uint64(i), 17))
			V := cfg["vocab_size"].(int)
			c := famCase{name: name + "/" + dt, dir: dir, temp: 0.8,
				seqs: [][]int{randomIDs(rng, 16, V), randomIDs(rng, 11, V), randomIDs(rng, 3, V)},
				gen:  randomIDs(rng, 6, V)}
			for _, seq := range c.seqs {
				d := make([]float32, len(seq))
				for j := 1; j < len(seq); j++ {
					if rng.IntN(4) > 0 { // some tokens outside the loss
						d[j] = float32(rng.NormFloat64())
					}
				}
				c.dlogp = append(c.dlogp, d)
			}
			cases = append(cases, c)
			jobs = append(jobs, refJob{Make: &refMake{Dir: dir, Config: cfg, DType: dt, Seed: uint64(100 + i)},
				Model: dir, Seqs: c.seqs, Greedy: &refGreedy{Prompt: c.gen, N: 32},
				Grad: &refGradJob{Seqs: c.seqs, DLogp: c.dlogp, Temperature: c.temp}})
		}
	}
	return cases, jobs
}

// worstLogitError is the largest relative error of m's logits against want[s][i] (every
// position of every sequence): through one batched prefill of all sequences, and through a
// prefill of two tokens followed by decoding one token at a time over the cache.
func worstLogitError(t *testing.T, m *Model, seqs [][]int, want [][][]float32) float64 {
	t.Helper()
	V := m.Config.Vocab
	cache := m.NewCache(len(seqs), 64)
	defer cache.Free()
	all, err := m.Forward(cache, seqs, false, AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	all = slices.Clone(all)
	row, worst := 0, 0.0
	for s, seq := range seqs {
		for i := range seq {
			worst = max(worst, relErr(all[row*V:(row+1)*V], want[s][i]))
			row++
		}
	}
	cache2 := m.NewCache(len(seqs), 64)
	defer cache2.Free()
	longest := 0
	for _, seq := range seqs {
		longest = max(longest, len(seq))
	}
	for i := 0; i < longest; {
		n := 1
		if i == 0 {
			n = 2
		}
		step := make([][]int, len(seqs))
		for s, seq := range seqs {
			if i < len(seq) {
				step[s] = seq[i:min(i+n, len(seq))]
			}
		}
		last, err := m.Forward(cache2, step, true, AdaptersOn)
		if err != nil {
			t.Fatal(err)
		}
		for s, seq := range seqs {
			if i < len(seq) {
				j := min(i+n, len(seq)) - 1
				worst = max(worst, relErr(last[s*V:(s+1)*V], want[s][j]))
			}
		}
		i += n
	}
	return worst
}

// fixedAdapter is a LoRA layer with given factors and no dropout, as a model adapter.
type fixedAdapter struct {
	l   *lora.Layer
	act lora.Activations
}

func (a *fixedAdapter) Forward(y, x backend.Buf, rows int, train bool) error {
	if !train {
		return a.l.Forward(y, x, rows, false, 0, nil)
	}
	return a.l.Forward(y, x, rows, true, 0, &a.act)
}

func (a *fixedAdapter) Backward(dx, dy, x backend.Buf, rows int) error {
	return a.l.Backward(dx, dy, x, &a.act)
}

// TestFamiliesMatchReference: each family, with F32 and BF16 weights, against the
// independent PyTorch implementation of testdata/reference.py, which also made the model:
// every position's logits (batched prefill, and decoding over the cache) within 1e-4,
// greedy generation token for token for 32 tokens, the log-probs and every parameter's
// gradient of Σ dlogp·logp, and the gradients of LoRA factors on every linear (PEFT's module
// names: phi3's fused qkv_proj and gate_up_proj included), within 1e-3.
func TestFamiliesMatchReference(t *testing.T) {
	cases, jobs := famCases(t)
	first := runReference(t, jobs)
	models := make([]*Model, len(cases))
	var loraJobs []refJob
	factors := make([]map[string]*refAdapter, len(cases))
	for ci, c := range cases {
		ref := first[ci]
		m, err := Load(c.dir)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		models[ci] = m
		if e := worstLogitError(t, m, c.seqs, ref.Logits); e > 1e-4 {
			t.Errorf("%s: logits differ from PyTorch by %.2g relative (tolerance 1e-4)", c.name, e)
		} else {
			t.Logf("%s: max relative logit error %.2g", c.name, e)
		}
		g, err := m.Generate([][]int{c.gen}, GenerateOptions{MaxNewTokens: 32, NoEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(g.Tokens[0], ref.Greedy) {
			t.Errorf("%s: greedy tokens\n got %v\nwant %v", c.name, g.Tokens[0], ref.Greedy)
		}

		tape := m.NewTape()
		if err := m.ForwardTrain(tape, c.seqs, TrainOptions{Temperature: c.temp}); err != nil {
			t.Fatal(err)
		}
		for s := range c.seqs {
			for j := range c.seqs[s] {
				if d := math.Abs(float64(tape.LogProbs[s][j]) - ref.Grad.Logp[s][j]); d > 1e-4*math.Max(1, math.Abs(ref.Grad.Logp[s][j])) {
					t.Fatalf("%s seq %d token %d: log-prob %g, PyTorch %g", c.name, s, j, tape.LogProbs[s][j], ref.Grad.Logp[s][j])
				}
			}
		}
		grads := newGrads(t, m)
		if err := m.Backward(tape, c.dlogp, grads); err != nil {
			t.Fatal(err)
		}
		worst, worstName := 0.0, ""
		for _, p := range m.Params {
			want, ok := ref.Grad.Params[p.Name]
			if !ok {
				t.Fatalf("%s: PyTorch has no gradient for %s", c.name, p.Name)
			}
			if e := gradErr(grads.Of(p).F32(), want); e > worst {
				worst, worstName = e, p.Name
			}
		}
		if len(ref.Grad.Params) != len(m.Params) {
			t.Errorf("%s: %d tensors here, %d in PyTorch", c.name, len(m.Params), len(ref.Grad.Params))
		}
		if worst > 1e-3 {
			t.Errorf("%s: gradient of %s differs from PyTorch by %.2g relative (tolerance 1e-3)", c.name, worstName, worst)
		} else {
			t.Logf("%s: worst parameter gradient error %.2g (%s)", c.name, worst, worstName)
		}

		// LoRA on every linear, with random factors (B not zero, so that A has a gradient)
		rng := rand.New(rand.NewPCG(uint64(ci), 23))
		factors[ci] = map[string]*refAdapter{}
		for _, l := range m.Linears() {
			const r = 3
			a, b := make([]float32, r*l.In), make([]float32, l.Out*r)
			for i := range a {
				a[i] = float32(0.2 * rng.NormFloat64())
			}
			for i := range b {
				b[i] = float32(0.2 * rng.NormFloat64())
			}
			factors[ci][l.Name] = &refAdapter{A: a, B: b, R: r}
		}
		loraJobs = append(loraJobs, refJob{Model: c.dir, Grad: &refGradJob{Seqs: c.seqs, DLogp: c.dlogp, Temperature: c.temp,
			LoRA: &refLoRA{Scale: 2, Adapters: factors[ci]}}})
		// the folder Save writes (config.json from Config) is the same model to PyTorch
		saved := filepath.Join(t.TempDir(), "saved")
		if err := m.Save(saved); err != nil {
			t.Fatal(err)
		}
		loraJobs = append(loraJobs, refJob{Model: saved, Seqs: c.seqs})
	}
	second := runReference(t, loraJobs)
	for ci, c := range cases {
		for s, seq := range c.seqs {
			for i := range seq {
				if e := relErr(second[2*ci+1].Logits[s][i], first[ci].Logits[s][i]); e > 1e-6 {
					t.Fatalf("%s: the saved folder's logits differ by %.2g in PyTorch", c.name, e)
				}
			}
		}
	}
	for ci, c := range cases {
		m, ref := models[ci], second[2*ci].Grad
		b := m.Backend()
		layers := map[string]*lora.Layer{}
		for _, l := range m.Linears() {
			f := factors[ci][l.Name]
			ll, err := lora.NewLayer(b, l.Name, l.In, l.Out, lora.Config{R: f.R, Alpha: 2 * float64(f.R)}, rand.New(rand.NewPCG(1, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Upload(ll.A, f.A); err != nil {
				t.Fatal(err)
			}
			if err := b.Upload(ll.B, f.B); err != nil {
				t.Fatal(err)
			}
			l.Adapter, layers[l.Name] = &fixedAdapter{l: ll}, ll
		}
		tape := m.NewTape()
		if err := m.ForwardTrain(tape, c.seqs, TrainOptions{Temperature: c.temp}); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(tape, c.dlogp, nil); err != nil {
			t.Fatal(err)
		}
		worst, worstName := 0.0, ""
		for name, ll := range layers {
			want, ok := ref.LoRA[name]
			if !ok {
				t.Fatalf("%s: PyTorch has no LoRA gradient for %s", c.name, name)
			}
			ga, gb := make([]float32, ll.GradA.Len()), make([]float32, ll.GradB.Len())
			if err := b.Download(ga, ll.GradA); err != nil {
				t.Fatal(err)
			}
			if err := b.Download(gb, ll.GradB); err != nil {
				t.Fatal(err)
			}
			for _, e := range []struct {
				got  []float32
				want []float64
				n    string
			}{{ga, want.A, name + " A"}, {gb, want.B, name + " B"}} {
				if err := gradErr(e.got, e.want); err > worst {
					worst, worstName = err, e.n
				}
			}
		}
		if worst > 1e-3 {
			t.Errorf("%s: LoRA gradient of %s differs from PyTorch by %.2g relative (tolerance 1e-3)", c.name, worstName, worst)
		} else {
			t.Logf("%s: worst LoRA gradient error %.2g (%s, %d adapted linears)", c.name, worst, worstName, len(layers))
		}
	}
}
