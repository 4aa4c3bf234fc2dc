package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/grpo"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/engine/optim"
)

func init() { register("model", false, modelChecks) }

// modelFamilies are small random models of every family engine/model reads, as config.json
// writes them (so the suite needs none of the model's field names): grouped-query ratios 1,
// 3 and 7, tied and untied heads, biases, a sliding window, and each later family's feature
// (q/k norms, gemma's scaled embeddings and 1 + w norms, soft-capping, local layers, partial
// rotary, layers without RoPE, norms after attention and the MLP).
var modelFamilies = []struct{ name, config string }{
	{"gpt2", `{"model_type": "gpt2", "vocab_size": 97, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
		"layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "tie_word_embeddings": true}`},
	{"llama", `{"model_type": "llama", "vocab_size": 113, "hidden_size": 56, "num_hidden_layers": 2,
		"num_attention_heads": 7, "num_key_value_heads": 1, "intermediate_size": 72, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-6, "rope_theta": 500000, "hidden_act": "silu", "tie_word_embeddings": false}`},
	{"qwen2", `{"model_type": "qwen2", "vocab_size": 151, "hidden_size": 48, "num_hidden_layers": 2,
		"num_attention_heads": 6, "num_key_value_heads": 2, "intermediate_size": 72, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-6, "rope_theta": 1000000, "hidden_act": "silu", "tie_word_embeddings": true}`},
	{"mistral", `{"model_type": "mistral", "vocab_size": 89, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-5, "rope_theta": 10000, "hidden_act": "silu", "sliding_window": 6, "tie_word_embeddings": false}`},
	{"qwen3", `{"model_type": "qwen3", "vocab_size": 101, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64,
		"max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "hidden_act": "silu",
		"tie_word_embeddings": true}`},
	{"gemma", `{"model_type": "gemma", "vocab_size": 103, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64,
		"max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000, "hidden_act": "gelu_pytorch_tanh",
		"hidden_activation": "gelu_pytorch_tanh"}`},
	{"gemma2", `{"model_type": "gemma2", "vocab_size": 107, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64,
		"max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000, "hidden_activation": "gelu_pytorch_tanh",
		"query_pre_attn_scalar": 16, "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0, "sliding_window": 6}`},
	{"gemma3_text", `{"model_type": "gemma3_text", "vocab_size": 109, "hidden_size": 32, "num_hidden_layers": 3,
		"num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64,
		"max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "rope_local_base_freq": 10000,
		"hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 16, "sliding_window": 6,
		"layer_types": ["sliding_attention", "sliding_attention", "full_attention"]}`},
	{"phi3", `{"model_type": "phi3", "vocab_size": 113, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
		"original_max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000, "hidden_act": "silu",
		"partial_rotary_factor": 0.5, "tie_word_embeddings": false}`},
	{"smollm3", `{"model_type": "smollm3", "vocab_size": 97, "hidden_size": 32, "num_hidden_layers": 3,
		"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-6, "rope_theta": 1000000, "hidden_act": "silu", "no_rope_layers": [1, 1, 0],
		"tie_word_embeddings": true}`},
	{"olmo2", `{"model_type": "olmo2", "vocab_size": 101, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-6, "rope_theta": 500000, "hidden_act": "silu", "tie_word_embeddings": false}`},
}

// modelSide is one family's model on one backend, with LoRA r 4 on every linear (A and B
// random, so that the adapters change the outputs and both get gradients).
type modelSide struct {
	m      *model.Model
	layers []*lora.Layer
	params []*optim.Param
}

// loraAdapter attaches a LoRA layer to a linear, keeping the training forward's activations
// for the backward.
type loraAdapter struct {
	l   *lora.Layer
	act lora.Activations
}

func (a *loraAdapter) Forward(y, x backend.Buf, rows int, train bool) error {
	if !train {
		return a.l.Forward(y, x, rows, false, 0, nil)
	}
	return a.l.Forward(y, x, rows, true, 0, &a.act)
}

func (a *loraAdapter) Backward(dx, dy, x backend.Buf, rows int) error {
	return a.l.Backward(dx, dy, x, &a.act)
}

func newModelSide(b backend.Backend, cfg *model.Config, seed uint64) (*modelSide, error) {
	m, err := model.NewRandom(*cfg, seed)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	for _, p := range m.Params { // every tensor random, biases and norm weights included
		for i := range p.Data {
			switch {
			case len(p.Shape) == 2:
				p.Data[i] = float32(rng.NormFloat64() * 0.15)
			case strings.Contains(p.Name, "norm") || strings.Contains(p.Name, "ln_"):
				// scales near 1 in every family (gemma's norms scale by 1 + w)
				p.Data[i] = 1 - cfg.NormOffset + float32(0.2*rng.NormFloat64())
			default:
				p.Data[i] = float32(0.1 * rng.NormFloat64())
			}
		}
	}
	if err := m.Use(b); err != nil {
		return nil, err
	}
	s := &modelSide{m: m}
	lc := lora.Config{R: 4, Alpha: 8, TargetModules: []string{"all-linear"}}
	for _, l := range m.Linears() {
		ll, err := lora.NewLayer(b, l.Name, l.In, l.Out, lc, rng)
		if err != nil {
			return nil, err
		}
		if err := ll.RandomizeB(rng); err != nil {
			return nil, err
		}
		l.Adapter = &loraAdapter{l: ll}
		an, bn := lora.TensorNames(l.Name)
		s.layers = append(s.layers, ll)
		s.params = append(s.params, &optim.Param{Name: an, Data: ll.A, Grad: ll.GradA}, &optim.Param{Name: bn, Data: ll.B, Grad: ll.GradB})
	}
	return s, nil
}

// tensors downloads the LoRA weights (grad false) or their gradients, in layer order.
func (s *modelSide) tensors(grad bool) ([][]float32, error) {
	var out [][]float32
	for _, p := range s.params {
		x := p.Data
		if grad {
			x = p.Grad
		}
		h := make([]float32, x.Len())
		if err := s.m.Backend().Download(h, x); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// modelChecks: for each family, the same random model and adapters on the reference and on
// the backend: log-probs with the adapters on and off, logits through the KV cache (prefill
// and a decode step), the training forward's log-probs and entropies and the LoRA gradients
// of a backward, one GRPO step (loss, clipping, AdamW) compared by the adapters it leaves,
// and greedy generation.
func modelChecks(e *env) {
	for _, fam := range modelFamilies {
		cfg, err := model.ParseConfig([]byte(fam.config))
		if err != nil {
			e.t.Errorf("%s: %v", fam.name, err)
			continue
		}
		e.modelFamily(fam.name, cfg)
	}
}

func (e *env) modelFamily(name string, cfg *model.Config) {
	sides := make([]*modelSide, 2)
	for i, b := range []backend.Backend{e.ref, e.b} {
		s, err := newModelSide(b, cfg, 7)
		if err != nil {
			e.t.Errorf("%s on %s: %v", name, b.Name(), err)
			return
		}
		sides[i] = s
	}
	ref := sides[0]
	tol := e.tol.Model
	rng := rand.New(rand.NewPCG(11, uint64(len(name))))
	ids := func(n int) []int {
		x := make([]int, n)
		for i := range x {
			x[i] = rng.IntN(cfg.Vocab)
		}
		return x
	}
	seqs := [][]int{ids(13), ids(1), ids(9), ids(20)}

	for _, ad := range []model.Adapters{model.AdaptersOn, model.AdaptersOff} {
		e.check("model "+name, fmt.Sprintf("log-probs, adapters %s", adName(ad)), func() {
			var got [2][][]float32
			for i, s := range sides {
				lp, err := s.m.LogProbs(seqs, 0.8, ad)
				if !e.must(s.m.Backend().Name()+": LogProbs", err) {
					return
				}
				got[i] = lp
			}
			e.close("log-probs", flat(got[1]), flat(got[0]), tol)
		})
	}

	e.check("model "+name, "logits through the KV cache: prefill, then a decode step", func() {
		var got [2][]float32
		for i, s := range sides {
			c := s.m.NewCache(2, 32)
			pre, err := s.m.Forward(c, [][]int{seqs[0][:7], seqs[2]}, false, model.AdaptersOn)
			if !e.must(s.m.Backend().Name()+": Forward (prefill)", err) {
				return
			}
			step, err := s.m.Forward(c, [][]int{{seqs[0][7]}, {seqs[3][0]}}, true, model.AdaptersOn)
			if !e.must(s.m.Backend().Name()+": Forward (decode)", err) {
				return
			}
			got[i] = append(pre, step...)
		}
		e.close("logits", got[1], got[0], tol)
	})

	dlogp := make([][]float32, len(seqs))
	for i, s := range seqs {
		dlogp[i] = make([]float32, len(s))
		for j := 1; j < len(s); j++ {
			dlogp[i][j] = float32(rng.NormFloat64())
		}
	}
	e.check("model "+name, "training forward and LoRA gradients", func() {
		var lp, ent [2][]float32
		var grads [2][][]float32
		for i, s := range sides {
			b := s.m.Backend()
			optim.ZeroGrad(b, s.params)
			tape := s.m.NewTape()
			if !e.must(b.Name()+": ForwardTrain", s.m.ForwardTrain(tape, seqs, model.TrainOptions{Temperature: 0.8, Entropy: true})) ||
				!e.must(b.Name()+": Backward", s.m.Backward(tape, dlogp, nil)) {
				return
			}
			lp[i], ent[i] = flat(tape.LogProbs), flat(tape.Entropy)
			g, err := s.tensors(true)
			if !e.must(b.Name()+": gradients", err) {
				return
			}
			grads[i] = g
		}
		e.close("training log-probs", lp[1], lp[0], tol)
		e.close("entropies", ent[1], ent[0], tol)
		e.closeNorm("LoRA gradients", ref.params, grads[1], grads[0], tol.Rel)
	})

	e.check("model "+name, "a GRPO step", func() {
		var after [2][][]float32
		var losses [2]float64
		for i, s := range sides {
			b := s.m.Backend()
			loss, err := grpoStep(s, seqs)
			if !e.must(b.Name()+": GRPO step", err) {
				return
			}
			w, err := s.tensors(false)
			if !e.must(b.Name()+": weights", err) {
				return
			}
			after[i], losses[i] = w, loss
		}
		if d := math.Abs(losses[1] - losses[0]); d > tol.Abs+tol.Rel*math.Abs(losses[0]) {
			e.errorf("loss %v, the reference's %v", losses[1], losses[0])
		}
		e.closeNorm("adapters after the update", ref.params, after[1], after[0], tol.Rel)
	})

	e.check("model "+name, "greedy generation", func() {
		prompts := [][]int{seqs[0][:5], seqs[3][:11], seqs[1]}
		var logits [][][]float32 // the reference's, per sequence and step
		var gens [2]*model.Generation
		for i, s := range sides {
			o := model.GenerateOptions{MaxNewTokens: 12, NoEOS: true}
			if i == 0 {
				logits = make([][][]float32, len(prompts))
				o.OnLogits = func(seq, step int, l []float32) {
					logits[seq] = append(logits[seq], append([]float32(nil), l...))
				}
			}
			g, err := s.m.Generate(prompts, o)
			if !e.must(s.m.Backend().Name()+": Generate", err) {
				return
			}
			gens[i] = g
		}
		for p := range prompts {
			want, got := gens[0].Tokens[p], gens[1].Tokens[p]
			if len(got) != len(want) {
				e.errorf("sequence %d: %d tokens, the reference %d", p, len(got), len(want))
				continue
			}
			for t := range want {
				if got[t] == want[t] {
					continue
				}
				// Where the products round differently, a near tie may go either way: the
				// two logits must be within both their tolerances of each other.
				l := logits[p][t]
				lw, lg := float64(l[want[t]]), float64(l[got[t]])
				if d := lw - lg; d > 2*tol.Abs+tol.Rel*(math.Abs(lw)+math.Abs(lg)) {
					e.errorf("sequence %d, token %d: %d (logit %.4f), the reference %d (%.4f)", p, t, got[t], l[got[t]], want[t], l[want[t]])
				}
				break // the sequences differ from here on
			}
		}
	})
}

// grpoStep runs one GRPO step as the trainer does, the group's rewards made up: the reference
// log-probs (adapters off), the training forward, DESIGN §5's loss (dapo, beta 0.04), the
// backward, clipping to norm 1 and AdamW. It returns the loss.
func grpoStep(s *modelSide, seqs [][]int) (float64, error) {
	b := s.m.Backend()
	refLP, err := s.m.LogProbs(seqs, 1, model.AdaptersOff)
	if err != nil {
		return 0, err
	}
	optim.ZeroGrad(b, s.params)
	tape := s.m.NewTape()
	if err := s.m.ForwardTrain(tape, seqs, model.TrainOptions{Temperature: 1}); err != nil {
		return 0, err
	}
	const prompt = 1 // every token after the first is the completion's
	rewards := []float64{0.1, 0.9, 0.4, 0.7}
	adv, _, err := grpo.Advantages(rewards, len(seqs), grpo.ScaleGroup)
	if err != nil {
		return 0, err
	}
	gs := make([]grpo.Sequence, len(seqs))
	total := 0
	for i, sq := range seqs {
		n := len(sq) - prompt
		lp, rl := make([]float64, n), make([]float64, n)
		for k := 0; k < n; k++ {
			lp[k], rl[k] = float64(tape.LogProbs[i][prompt+k]), float64(refLP[i][prompt+k])
		}
		gs[i] = grpo.Sequence{LogP: lp, RefLogP: rl, Advantage: adv[i]}
		total += n
	}
	res, err := grpo.Loss(gs, grpo.Params{Beta: 0.04, Epsilon: 0.2, EpsilonHigh: 0.2, LossType: grpo.LossDAPO, Tokens: total, TopEntropyQuantile: 1})
	if err != nil {
		return 0, err
	}
	dlogp := make([][]float32, len(seqs))
	for i, sq := range seqs {
		dlogp[i] = make([]float32, len(sq))
		for k, g := range res.Grad[i] {
			dlogp[i][prompt+k] = float32(g)
		}
	}
	if err := s.m.Backward(tape, dlogp, nil); err != nil {
		return 0, err
	}
	if _, err := optim.ClipGradNorm(b, s.params, 1); err != nil {
		return 0, err
	}
	opt, err := optim.NewAdamW(b, s.params, 0.9, 0.999, 1e-8, 0)
	if err != nil {
		return 0, err
	}
	opt.AfterUpdate(s.m.AdaptersChanged)
	return res.Loss, opt.Update(1e-2)
}

// closeNorm compares tensors by the norm of their difference relative to the reference's
// norm (bf16 products make every value a little off; a wrong gradient makes the norm off).
func (e *env) closeNorm(what string, params []*optim.Param, got, want [][]float32, rel float64) {
	e.t.Helper()
	if len(got) != len(want) {
		e.errorf("%s: %d tensors, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		var d, n float64
		for j := range want[i] {
			x := float64(got[i][j]) - float64(want[i][j])
			d += x * x
			n += float64(want[i][j]) * float64(want[i][j])
		}
		if n == 0 {
			e.errorf("%s: %s is all zeros: the check would prove nothing", what, params[i].Name)
			continue
		}
		if r := math.Sqrt(d / n); !(r <= rel) {
			e.errorf("%s: %s off by %.3g of its norm (tolerance %g)", what, params[i].Name, r, rel)
		}
	}
}

func flat(x [][]float32) []float32 {
	var r []float32
	for _, v := range x {
		r = append(r, v...)
	}
	return r
}

func adName(a model.Adapters) string {
	if a == model.AdaptersOff {
		return "off"
	}
	return "on"
}
