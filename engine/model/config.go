package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Family is the architecture a model_type belongs to.
type Family string

const (
	GPT2  Family = "gpt2"  // learned positions, LayerNorm, GELU (tanh), fused c_attn
	Llama Family = "llama" // RoPE, RMSNorm, gated MLP, grouped-query attention: every other model type
)

// Activation is the MLP's nonlinearity.
type Activation string

const (
	GELU   Activation = "gelu"   // gpt2: down(GELU(fc(x))), GELU's tanh approximation
	SwiGLU Activation = "swiglu" // down(SiLU(gate(x))·up(x)): llama, mistral, qwen2, qwen3, phi3
	GeGLU  Activation = "geglu"  // down(GELU(gate(x))·up(x)), GELU's tanh approximation: gemma
)

// Config is the part of a Hugging Face config.json that the forward pass depends on. The
// differences between families are data here, read by the one layer loop: which norms a
// block has, how attention is scaled, masked and capped, how RoPE is built.
type Config struct {
	ModelType string // gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, smollm3 or olmo2
	Vocab     int    // vocab_size
	Dim       int    // hidden_size (n_embd)
	Layers    int    // num_hidden_layers (n_layer)
	Heads     int    // num_attention_heads (n_head)
	KVHeads   int    // num_key_value_heads (= Heads without GQA)
	HeadDim   int    // head_dim, else Dim/Heads
	Hidden    int    // intermediate_size (n_inner, default 4·Dim)
	MaxPos    int    // context length: max_position_embeddings (n_positions)
	NormEps   float64
	RopeTheta float64
	// RopeScaling is nil for plain RoPE.
	RopeScaling *RopeScaling
	QKVBias     bool // bias on the q, k, v projections
	OBias       bool // bias on the attention output projection
	MLPBias     bool
	TieEmbed    bool // the LM head shares the token embedding
	Window      int  // sliding-window attention (mistral, phi3, gemma2/3's local layers), 0 for none
	BOS         int  // beginning-of-sequence id, -1 when none
	EOS         []int

	// Set by the model type (Validate fills them in):
	MLP        Activation
	QKNorm     bool    // RMSNorm over each head of q and k before RoPE: q_norm, k_norm (qwen3, gemma3)
	NormOffset float32 // every RMSNorm scales by (NormOffset + w): 1 for gemma's (1 + w), else 0
	EmbedScale float64 // token embeddings are multiplied by it (gemma: √hidden); 0 for none
	Sandwich   bool    // gemma2/3: a norm after attention and one around the MLP too
	PostNorm   bool    // olmo2: norms on attention's and the MLP's outputs only, none before them
	QKNormFull bool    // olmo2: the q and k norms span the whole row, not each head
	Fused      bool    // phi3: q, k, v in one qkv_proj, gate and up in one gate_up_proj

	// Read from config.json where the family has them:
	QueryScale   float64 // query_pre_attn_scalar: attention scores scaled by its 1/√ (0: by 1/√HeadDim)
	AttnSoftcap  float64 // attn_logit_softcapping: scores s → c·tanh(s/c) before the softmax; 0 none
	FinalSoftcap float64 // final_logit_softcapping: logits z → c·tanh(z/c); 0 none
	// Sliding marks the layers that attend within Window (gemma2/3's local layers); nil
	// means every layer does when Window > 0.
	Sliding []bool
	// LocalRopeTheta is the RoPE base of the sliding layers (gemma3's rope_local_base_freq),
	// without rope scaling; 0: they use RopeTheta and RopeScaling like the others.
	LocalRopeTheta float64
	RotaryDim      int // leading dimensions of each head that RoPE rotates (phi3's partial_rotary_factor); 0: HeadDim
	// NoRoPE marks the layers that attend without rotary embeddings (SmolLM3's NoPE layers,
	// no_rope_layers 0); nil: every layer rotates.
	NoRoPE []bool
}

// RopeScaling is a rope_scaling entry (rope_parameters in transformers 5); the types
// implemented are "linear", "llama3", "dynamic" (NTK), "yarn" and "longrope" (Phi-3's "su"
// included), each as transformers computes it.
type RopeScaling struct {
	Type           string  `json:"rope_type"`
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPos int     `json:"original_max_position_embeddings,omitempty"`
	// longrope: per-frequency divisors of the inverse frequencies (short_factor while a
	// forward stays within OriginalMaxPos, long_factor once it goes past). longrope and
	// yarn: the factor that multiplies cos and sin (attention_factor).
	ShortFactor     []float64 `json:"short_factor,omitempty"`
	LongFactor      []float64 `json:"long_factor,omitempty"`
	AttentionFactor float64   `json:"attention_factor,omitempty"`
	// yarn: the rotation counts that bound the blend between interpolated and extrapolated
	// frequencies (32 and 1 by default), and whether those bounds are rounded outwards.
	BetaFast float64 `json:"beta_fast,omitempty"`
	BetaSlow float64 `json:"beta_slow,omitempty"`
	Truncate *bool   `json:"truncate,omitempty"`
}

// Family returns the architecture of c.ModelType.
func (c *Config) Family() Family {
	if c.ModelType == "gpt2" {
		return GPT2
	}
	return Llama
}

// KVDim is the width of a key or value row: KVHeads·HeadDim.
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

// QDim is the width of a query row: Heads·HeadDim.
func (c *Config) QDim() int { return c.Heads * c.HeadDim }

// Rotary is the number of leading dimensions of each head that RoPE rotates.
func (c *Config) Rotary() int {
	if c.RotaryDim > 0 {
		return c.RotaryDim
	}
	return c.HeadDim
}

// AttnScale multiplies q·k before the softmax: 1/√query_pre_attn_scalar, else 1/√HeadDim.
func (c *Config) AttnScale() float32 {
	s := c.QueryScale
	if s == 0 {
		s = float64(c.HeadDim)
	}
	return float32(1 / math.Sqrt(s))
}

// local reports whether layer l is a sliding-window one (all are when Sliding is nil).
func (c *Config) local(l int) bool { return c.Sliding == nil || c.Sliding[l] }

// LayerWindow is the sliding window of layer l, 0 when it attends to every earlier position.
func (c *Config) LayerWindow(l int) int {
	if !c.local(l) {
		return 0
	}
	return c.Window
}

// qkNormRows is the shape of the q and k norms over rows rows: per head, or over whole rows
// (QKNormFull).
func (c *Config) qkNormRows(rows int) (qRows, qDim, kRows, kDim int) {
	if c.QKNormFull {
		return rows, c.QDim(), rows, c.KVDim()
	}
	return rows * c.Heads, c.HeadDim, rows * c.KVHeads, c.HeadDim
}

// RoPE reports whether layer l rotates q and k.
func (c *Config) RoPE(l int) bool { return c.Family() == Llama && (c.NoRoPE == nil || !c.NoRoPE[l]) }

// LocalRoPE reports whether layer l uses the local RoPE (LocalInvFreq) rather than InvFreq.
func (c *Config) LocalRoPE(l int) bool { return c.LocalRopeTheta > 0 && c.local(l) }

// Context is the longest sequence the model runs: MaxPos, or for dynamic NTK scaling
// MaxPos·factor, the length it stretches the context to.
func (c *Config) Context() int {
	if rs := c.RopeScaling; rs != nil && rs.Type == "dynamic" && rs.Factor > 1 {
		return int(float64(c.MaxPos) * rs.Factor)
	}
	return c.MaxPos
}

// RopeAttentionFactor multiplies RoPE's cos and sin tables (longrope's and yarn's attention
// factor), 1 otherwise.
func (c *Config) RopeAttentionFactor() float64 {
	if rs := c.RopeScaling; rs != nil && (rs.Type == "longrope" || rs.Type == "yarn") {
		return rs.AttentionFactor
	}
	return 1
}

// LoadConfig reads dir/config.json and, when present, dir/generation_config.json: its eos ids
// replace config.json's (transformers' generate stops on generation_config's), its bos fills
// in a missing one.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model folder %s: %w", dir, err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	gpath := filepath.Join(dir, "generation_config.json")
	if g, err := os.ReadFile(gpath); err == nil {
		var raw map[string]any
		if err := json.Unmarshal(g, &raw); err != nil {
			return nil, fmt.Errorf("%s: %w", gpath, err)
		}
		cf := fields(raw)
		if c.BOS < 0 {
			if c.BOS, err = cf.tokenID("bos_token_id"); err != nil {
				return nil, fmt.Errorf("%s: %w", gpath, err)
			}
		}
		eos, err := cf.tokenIDs("eos_token_id")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", gpath, err)
		}
		if len(eos) > 0 { // generation_config wins for generation, as in transformers
			c.EOS = eos
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return c, nil
}

// decoderTypes are the model types of the Llama family this package reads.
var decoderTypes = []string{"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "smollm3", "olmo2"}

// isGemma reports whether a model type is one of the gemma generations.
func isGemma(mt string) bool { return mt == "gemma" || mt == "gemma2" || mt == "gemma3_text" }

// ParseConfig reads the fields of a config.json and checks that this package implements
// everything they ask for: unknown model types, activations, rope scalings and keys that
// change the maths of a family that has none of them are errors rather than silently
// different results.
func ParseConfig(data []byte) (*Config, error) {
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if err := checkTypes(raw, ""); err != nil {
		return nil, err
	}
	f := fields(raw)
	mt, _ := raw["model_type"].(string)
	if mt == "" && isOldGPT2(f) {
		mt = "gpt2"
	}
	c := &Config{ModelType: mt}
	var err error
	switch {
	case mt == "gpt2":
		err = c.parseGPT2(f)
	case slices.Contains(decoderTypes, mt):
		err = c.parseDecoder(f)
	case mt == "":
		return nil, errors.New("no model_type")
	case mt == "gemma3":
		return nil, errors.New(`model_type "gemma3" (the image-text model) is not supported; its text-only form gemma3_text is (Gemma-3-1B)`)
	default:
		return nil, fmt.Errorf("model_type %q is not supported (gpt2, %s)", mt, strings.Join(decoderTypes, ", "))
	}
	if err != nil {
		return nil, err
	}
	if c.BOS, err = f.tokenID("bos_token_id"); err != nil {
		return nil, err
	}
	if c.EOS, err = f.tokenIDs("eos_token_id"); err != nil {
		return nil, err
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		if c.Dim%c.Heads != 0 {
			return nil, fmt.Errorf("hidden size %d is not a multiple of the %d heads", c.Dim, c.Heads)
		}
		c.HeadDim = c.Dim / c.Heads
	}
	if (mt == "gemma2" || mt == "gemma3_text") && c.QueryScale == 0 { // null: the head size
		c.QueryScale = float64(c.HeadDim)
	}
	if p, set := f.rotaryFactor(); set && c.HeadDim > 0 {
		// int(head_dim·factor), as transformers sizes the rotated part
		if c.RotaryDim = int(float64(c.HeadDim) * p); c.RotaryDim == c.HeadDim {
			c.RotaryDim = 0
		} else if c.RotaryDim <= 0 || c.RotaryDim%2 != 0 {
			return nil, fmt.Errorf("partial_rotary_factor %g gives %d rotated dimensions of the %d of a head: want a positive even number", p, c.RotaryDim, c.HeadDim)
		}
	}
	c.implied()
	return c, c.check()
}

// isOldGPT2 recognises the GPT-2 configs written before model_type existed (n_embd and
// n_layer, or the GPT2LMHeadModel architecture), which transformers still loads as gpt2.
func isOldGPT2(f fields) bool {
	if archs, ok := f["architectures"].([]any); ok && slices.Contains(archs, any("GPT2LMHeadModel")) {
		return true
	}
	_, embd := f["n_embd"].(float64)
	_, layers := f["n_layer"].(float64)
	return embd && layers
}

// rotaryFactor reads partial_rotary_factor, at the top level or inside rope_parameters.
func (f fields) rotaryFactor() (float64, bool) {
	params, _ := f["rope_parameters"].(map[string]any)
	p := f.float("partial_rotary_factor", fields(params).float("partial_rotary_factor", 1))
	return p, p != 1
}

func (c *Config) parseGPT2(f fields) error {
	var err error
	req := func(dst *int, keys ...string) {
		if err == nil {
			*dst, err = f.requiredInt(keys...)
		}
	}
	opt := func(dst *int, def int, keys ...string) {
		if err == nil {
			*dst, err = f.optionalInt(def, keys...)
		}
	}
	req(&c.Vocab, "vocab_size")
	req(&c.Dim, "n_embd", "hidden_size")
	req(&c.Layers, "n_layer", "num_hidden_layers")
	req(&c.Heads, "n_head", "num_attention_heads")
	opt(&c.MaxPos, 1024, "n_positions", "n_ctx", "max_position_embeddings")
	opt(&c.Hidden, 4*c.Dim, "n_inner")
	if err != nil {
		return err
	}
	c.KVHeads, c.HeadDim = c.Heads, 0
	c.NormEps = f.float("layer_norm_epsilon", 1e-5)
	c.TieEmbed = f.bool("tie_word_embeddings", true)
	if act := f.string("activation_function", "gelu_new"); act != "gelu_new" && act != "gelu_pytorch_tanh" {
		return fmt.Errorf("activation_function %q is not supported (gelu_new, gelu_pytorch_tanh)", act)
	}
	if f.bool("scale_attn_by_inverse_layer_idx", false) {
		return errors.New("scale_attn_by_inverse_layer_idx is not supported")
	}
	if !f.bool("scale_attn_weights", true) {
		return errors.New("scale_attn_weights=false is not supported")
	}
	if _, set := f.rotaryFactor(); set {
		return errors.New("partial_rotary_factor is not supported for gpt2")
	}
	return nil
}

// parseDecoder reads the model types of the Llama family. Defaults are those of each
// type's transformers configuration class, as a config.json without the key means them.
func (c *Config) parseDecoder(f fields) error {
	mt := c.ModelType
	gemma := isGemma(mt)
	var err error
	req := func(dst *int, keys ...string) {
		if err == nil {
			*dst, err = f.requiredInt(keys...)
		}
	}
	opt := func(dst *int, def int, keys ...string) {
		if err == nil {
			*dst, err = f.optionalInt(def, keys...)
		}
	}
	req(&c.Vocab, "vocab_size")
	req(&c.Dim, "hidden_size")
	req(&c.Layers, "num_hidden_layers")
	req(&c.Heads, "num_attention_heads")
	req(&c.Hidden, "intermediate_size")
	opt(&c.KVHeads, c.Heads, "num_key_value_heads")
	opt(&c.HeadDim, map[string]int{"gemma": 256, "gemma2": 256, "gemma3_text": 256, "qwen3": 128}[mt], "head_dim")
	opt(&c.MaxPos, map[string]int{"gemma": 8192, "gemma2": 8192, "gemma3_text": 131072, "qwen3": 32768,
		"phi3": 4096}[mt], "max_position_embeddings")
	if c.MaxPos == 0 {
		c.MaxPos = 2048
	}
	if err != nil {
		return err
	}
	eps := 1e-6
	if mt == "phi3" {
		eps = 1e-5
	}
	if mt == "olmo2" {
		eps = 1e-5
	}
	c.NormEps = f.float("rms_norm_eps", eps)
	c.TieEmbed = f.bool("tie_word_embeddings", gemma || mt == "smollm3") // each config class's default

	if gemma {
		// gemma's own configs name the activation hidden_activation (gemma 1's first ones
		// said "gelu" in hidden_act and meant the tanh approximation it was trained with)
		act := f.string("hidden_activation", f.string("hidden_act", "gelu_pytorch_tanh"))
		if act == "gelu" && mt == "gemma" && f["hidden_activation"] == nil {
			act = "gelu_pytorch_tanh"
		}
		if act != "gelu_pytorch_tanh" && act != "gelu_new" {
			return fmt.Errorf("hidden_activation %q is not supported (gelu_pytorch_tanh)", act)
		}
	} else {
		if act := f.string("hidden_act", "silu"); act != "silu" && act != "swish" {
			return fmt.Errorf("hidden_act %q is not supported (silu)", act)
		}
		if act := f.string("hidden_activation", "silu"); act != "silu" && act != "swish" {
			return fmt.Errorf("hidden_activation %q is not supported for %s (silu)", act, mt)
		}
	}
	if f.bool("use_bidirectional_attention", false) {
		return errors.New("use_bidirectional_attention=true is not supported: this package runs causal language models")
	}

	switch mt {
	case "llama", "smollm3": // attention_bias covers q, k, v and o; mlp_bias the three MLP linears
		c.QKVBias = f.bool("attention_bias", false)
		c.OBias, c.MLPBias = c.QKVBias, f.bool("mlp_bias", false)
	case "qwen2": // q, k, v always have a bias, o_proj and the MLP never
		c.QKVBias = true
	case "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2": // attention_bias covers q, k, v and o
		c.QKVBias = f.bool("attention_bias", false)
		c.OBias = c.QKVBias
	}
	switch mt {
	case "qwen2", "qwen3", "smollm3":
		if f.bool("use_sliding_window", false) {
			return errors.New("use_sliding_window=true is not supported")
		}
	case "mistral", "phi3":
		opt(&c.Window, 0, "sliding_window")
	case "gemma2", "gemma3_text":
		opt(&c.Window, 4096, "sliding_window")
	}
	if err != nil {
		return err
	}
	if err := c.parseLayerTypes(f); err != nil {
		return err
	}
	if err := c.parseNoRoPE(f); err != nil {
		return err
	}

	// Keys that change the maths, read where the family has them and refused elsewhere.
	nullable := func(key string, def float64, has bool) (float64, error) {
		v, present := f[key]
		switch {
		case !present:
			if has {
				return def, nil
			}
			return 0, nil
		case v == nil:
			return 0, nil
		case !has:
			return 0, fmt.Errorf("%s is not part of %s (gemma2 and gemma3_text have it)", key, mt)
		}
		x := v.(float64)
		if x <= 0 || math.IsInf(x, 0) {
			return 0, fmt.Errorf("%s %g must be positive", key, x)
		}
		return x, nil
	}
	sandwich := mt == "gemma2" || mt == "gemma3_text"
	if c.QueryScale, err = nullable("query_pre_attn_scalar", 256, sandwich); err != nil {
		return err
	}
	// gemma2 caps by default; gemma3 honours the keys but has no default
	attnCap, finalCap := 0.0, 0.0
	if mt == "gemma2" {
		attnCap, finalCap = 50, 30
	}
	if c.AttnSoftcap, err = nullable("attn_logit_softcapping", attnCap, sandwich); err != nil {
		return err
	}
	if c.FinalSoftcap, err = nullable("final_logit_softcapping", finalCap, sandwich); err != nil {
		return err
	}
	if mt != "gemma3_text" && f["rope_local_base_freq"] != nil {
		return fmt.Errorf("rope_local_base_freq is not part of %s (only gemma3_text has it)", mt)
	}
	if _, set := f.rotaryFactor(); set && mt != "phi3" {
		return fmt.Errorf("partial_rotary_factor is not supported for %s (only phi3)", mt)
	}
	return c.parseRope(f)
}

// parseLayerTypes reads which layers are sliding-window ones: layer_types, else gemma2's
// alternation (even layers local) or gemma3's sliding_window_pattern (every sixth layer
// global). Families without local layers may list only full_attention.
func (c *Config) parseLayerTypes(f fields) error {
	mt := c.ModelType
	local := mt == "gemma2" || mt == "gemma3_text"
	if p := f["sliding_window_pattern"]; p != nil && mt != "gemma3_text" {
		return fmt.Errorf("sliding_window_pattern is not part of %s (only gemma3_text has it)", mt)
	}
	if lt, ok := f["layer_types"].([]any); ok {
		if len(lt) != c.Layers {
			return fmt.Errorf("layer_types has %d entries for %d layers", len(lt), c.Layers)
		}
		sliding := make([]bool, len(lt))
		for i, v := range lt {
			switch s, _ := v.(string); {
			case s == "full_attention":
			case s == "sliding_attention" && local:
				sliding[i] = true
			default:
				return fmt.Errorf("layer_types[%d] %q is not supported for %s", i, s, mt)
			}
		}
		if local {
			c.Sliding = sliding
		}
		return nil
	}
	if !local || c.Layers <= 0 || c.Layers > maxLayers { // check refuses the sizes
		return nil
	}
	pattern := 2
	if mt == "gemma3_text" {
		var err error
		if pattern, err = f.optionalInt(6, "sliding_window_pattern"); err != nil {
			return err
		}
		if pattern <= 0 {
			return fmt.Errorf("sliding_window_pattern %d must be positive", pattern)
		}
	}
	c.Sliding = make([]bool, c.Layers)
	for i := range c.Sliding {
		c.Sliding[i] = (i+1)%pattern != 0
	}
	return nil
}

// parseNoRoPE reads SmolLM3's NoPE layers: no_rope_layers (1: the layer uses RoPE, 0: not;
// at least one entry per layer), else one layer in no_rope_layer_interval without.
func (c *Config) parseNoRoPE(f fields) error {
	list, hasList := f["no_rope_layers"].([]any)
	_, hasInterval := f["no_rope_layer_interval"].(float64)
	if c.ModelType != "smollm3" {
		if hasList || hasInterval {
			return fmt.Errorf("no_rope_layers is not part of %s (smollm3 has it)", c.ModelType)
		}
		return nil
	}
	if c.Layers <= 0 || c.Layers > maxLayers { // check refuses the sizes
		return nil
	}
	c.NoRoPE = make([]bool, c.Layers)
	if hasList {
		if len(list) < c.Layers {
			return fmt.Errorf("no_rope_layers has %d entries for %d layers", len(list), c.Layers)
		}
		for l := range c.NoRoPE {
			switch list[l].(float64) {
			case 0:
				c.NoRoPE[l] = true
			case 1:
			default:
				return fmt.Errorf("no_rope_layers[%d] is %v: want 0 or 1", l, list[l])
			}
		}
		return nil
	}
	every, err := f.optionalInt(4, "no_rope_layer_interval")
	if err != nil {
		return err
	}
	if every <= 0 {
		return fmt.Errorf("no_rope_layer_interval %d must be positive", every)
	}
	for l := range c.NoRoPE {
		c.NoRoPE[l] = (l+1)%every == 0
	}
	return nil
}

// parseRope reads rope_theta and rope_scaling, at the top level or inside rope_parameters
// (which gemma3_text may key by layer type: full_attention, sliding_attention).
func (c *Config) parseRope(f fields) error {
	params, _ := f["rope_parameters"].(map[string]any)
	var local map[string]any
	if c.ModelType == "gemma3_text" {
		if full, ok := params["full_attention"].(map[string]any); ok {
			local, _ = params["sliding_attention"].(map[string]any)
			params = full
		}
	}
	pf := fields(params)
	defTheta := 10000.0
	if c.ModelType == "gemma3_text" {
		defTheta = 1e6
	}
	c.RopeTheta = f.float("rope_theta", pf.float("rope_theta", defTheta))
	if c.ModelType == "gemma3_text" {
		lf := fields(local)
		c.LocalRopeTheta = lf.float("rope_theta", f.float("rope_local_base_freq", 10000))
		if typ := lf.string("rope_type", lf.string("type", "default")); typ != "default" {
			return fmt.Errorf("rope_parameters.sliding_attention: rope type %q is not supported on the sliding layers (default)", typ)
		}
	}
	scaling, _ := f["rope_scaling"].(map[string]any)
	if scaling == nil {
		scaling = params
	}
	sf := fields(scaling)
	typ := sf.string("rope_type", sf.string("type", "default"))
	switch typ {
	case "default":
		return nil
	case "linear", "llama3":
		rs := &RopeScaling{Type: typ, Factor: sf.float("factor", 0)}
		if typ == "llama3" {
			rs.LowFreqFactor = sf.float("low_freq_factor", 0)
			rs.HighFreqFactor = sf.float("high_freq_factor", 0)
			rs.OriginalMaxPos = int(sf.float("original_max_position_embeddings", 0))
			if rs.LowFreqFactor <= 0 || rs.HighFreqFactor <= rs.LowFreqFactor || rs.OriginalMaxPos <= 0 {
				return errors.New("rope_scaling llama3 needs low_freq_factor < high_freq_factor and original_max_position_embeddings")
			}
		}
		if rs.Factor <= 0 {
			return fmt.Errorf("rope_scaling %s needs a positive factor", typ)
		}
		c.RopeScaling = rs
		return nil
	case "dynamic":
		rs := &RopeScaling{Type: typ, Factor: sf.float("factor", 0)}
		if !(rs.Factor >= 1) {
			return fmt.Errorf("rope_scaling dynamic needs a factor of at least 1, not %g", rs.Factor)
		}
		c.RopeScaling = rs
		return nil
	case "yarn":
		return c.parseYarn(f, sf)
	case "longrope", "su":
		rs := &RopeScaling{Type: "longrope"}
		var err error
		if rs.ShortFactor, err = sf.numbers("short_factor"); err != nil {
			return err
		}
		if rs.LongFactor, err = sf.numbers("long_factor"); err != nil {
			return err
		}
		// Phi-3 keeps original_max_position_embeddings at the top level
		rs.OriginalMaxPos = int(sf.float("original_max_position_embeddings", f.float("original_max_position_embeddings", 0)))
		if rs.OriginalMaxPos <= 0 {
			return errors.New("rope_scaling longrope needs original_max_position_embeddings")
		}
		rs.Factor = sf.float("factor", float64(c.MaxPos)/float64(rs.OriginalMaxPos))
		rs.AttentionFactor = sf.float("attention_factor", 0)
		if rs.AttentionFactor == 0 { // LongRoPE's choice: √(1 + ln factor / ln original context)
			rs.AttentionFactor = 1
			if rs.Factor > 1 {
				rs.AttentionFactor = math.Sqrt(1 + math.Log(rs.Factor)/math.Log(float64(rs.OriginalMaxPos)))
			}
		}
		c.RopeScaling = rs
		return nil
	default:
		return fmt.Errorf("rope_scaling type %q is not supported (default, linear, llama3, dynamic, yarn, longrope)", typ)
	}
}

// parseYarn reads a yarn scaling with transformers' defaults: the original context from
// rope_scaling, the top level or max_position_embeddings; factor, else the ratio of the two
// contexts; attention factor 0.1·ln(factor)+1 (or mscale over mscale_all_dim of it);
// beta_fast 32, beta_slow 1.
func (c *Config) parseYarn(f, sf fields) error {
	rs := &RopeScaling{Type: "yarn"}
	rs.OriginalMaxPos = int(sf.float("original_max_position_embeddings", f.float("original_max_position_embeddings", float64(c.MaxPos))))
	if rs.OriginalMaxPos <= 0 {
		return fmt.Errorf("rope_scaling yarn: original_max_position_embeddings %d must be positive", rs.OriginalMaxPos)
	}
	rs.Factor = sf.float("factor", float64(c.MaxPos)/float64(rs.OriginalMaxPos))
	if !(rs.Factor > 0) || math.IsInf(rs.Factor, 0) {
		return fmt.Errorf("rope_scaling yarn needs a positive factor, not %g", rs.Factor)
	}
	mscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	rs.AttentionFactor = sf.float("attention_factor", 0)
	if rs.AttentionFactor == 0 {
		m, all := sf.float("mscale", 0), sf.float("mscale_all_dim", 0)
		if m != 0 && all != 0 {
			rs.AttentionFactor = mscale(rs.Factor, m) / mscale(rs.Factor, all)
		} else {
			rs.AttentionFactor = mscale(rs.Factor, 1)
		}
	}
	rs.BetaFast, rs.BetaSlow = sf.float("beta_fast", 0), sf.float("beta_slow", 0)
	if rs.BetaFast == 0 {
		rs.BetaFast = 32
	}
	if rs.BetaSlow == 0 {
		rs.BetaSlow = 1
	}
	if !(rs.BetaFast > 0 && rs.BetaSlow > 0) {
		return fmt.Errorf("rope_scaling yarn: beta_fast %g and beta_slow %g must be positive", rs.BetaFast, rs.BetaSlow)
	}
	if v, ok := sf["truncate"].(bool); ok && !v {
		rs.Truncate = &v
	}
	c.RopeScaling = rs
	return nil
}

// implied sets what the model type implies: which linears have a bias and GPT-2's head
// count, and the family's maths flags.
func (c *Config) implied() {
	mt := c.ModelType
	switch mt {
	case "gpt2":
		c.QKVBias, c.OBias, c.MLPBias, c.KVHeads = true, true, true, c.Heads
		c.Window = 0
	case "llama", "smollm3":
		c.OBias = c.QKVBias
	case "qwen2":
		c.QKVBias, c.OBias, c.MLPBias = true, false, false
	case "mistral", "phi3":
		c.QKVBias, c.OBias, c.MLPBias = false, false, false
	case "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2":
		c.OBias, c.MLPBias = c.QKVBias, false
	}
	c.MLP = SwiGLU
	if mt == "gpt2" {
		c.MLP = GELU
	}
	c.QKNorm = mt == "qwen3" || mt == "gemma3_text" || mt == "olmo2"
	c.PostNorm, c.QKNormFull = mt == "olmo2", mt == "olmo2"
	c.Sandwich = mt == "gemma2" || mt == "gemma3_text"
	c.Fused = mt == "phi3"
	c.NormOffset, c.EmbedScale = 0, 0
	if isGemma(mt) {
		c.MLP, c.NormOffset, c.EmbedScale = GeGLU, 1, math.Sqrt(float64(c.Dim))
	}
}

// Validate sets what the model type implies (which linears have a bias, GPT-2's head
// count, the family's flags) and the defaults of zero fields (HeadDim = Dim/Heads, KVHeads
// = Heads), and checks the sizes against each other.
func (c *Config) Validate() error {
	if c.ModelType != "gpt2" && !slices.Contains(decoderTypes, c.ModelType) {
		return fmt.Errorf("model_type %q is not supported (gpt2, %s)", c.ModelType, strings.Join(decoderTypes, ", "))
	}
	c.implied()
	return c.check()
}

// maxLayers bounds num_hidden_layers before anything is allocated per layer.
const maxLayers = 1 << 16

// check checks the sizes and the family's values against each other.
func (c *Config) check() error {
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	llama := c.Family() == Llama
	switch {
	case c.Vocab <= 0 || c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.Hidden <= 0 || c.MaxPos <= 0:
		return fmt.Errorf("sizes must be positive (vocab %d, hidden %d, layers %d, heads %d, intermediate %d, context %d)",
			c.Vocab, c.Dim, c.Layers, c.Heads, c.Hidden, c.MaxPos)
	case c.Layers > maxLayers:
		return fmt.Errorf("%d layers: more than the %d this package runs", c.Layers, maxLayers)
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("num_key_value_heads %d does not divide num_attention_heads %d", c.KVHeads, c.Heads)
	case c.HeadDim <= 0:
		return fmt.Errorf("head_dim %d must be positive", c.HeadDim)
	case llama && c.HeadDim%2 != 0:
		return fmt.Errorf("head_dim %d must be even for RoPE", c.HeadDim)
	case c.RotaryDim != 0 && (!llama || c.RotaryDim < 0 || c.RotaryDim%2 != 0 || c.RotaryDim > c.HeadDim):
		return fmt.Errorf("%d rotated dimensions per head: want an even number up to head_dim %d", c.RotaryDim, c.HeadDim)
	case c.Family() == GPT2 && c.HeadDim*c.Heads != c.Dim:
		return fmt.Errorf("n_embd %d is not n_head %d × head size %d", c.Dim, c.Heads, c.HeadDim)
	case llama && c.RopeTheta <= 0:
		return fmt.Errorf("rope_theta %g must be positive", c.RopeTheta)
	case c.LocalRopeTheta < 0 || c.LocalRopeTheta > 0 && c.ModelType != "gemma3_text":
		return fmt.Errorf("a local rope base (%g) is part of gemma3_text only", c.LocalRopeTheta)
	case c.NormEps <= 0:
		return fmt.Errorf("norm epsilon %g must be positive", c.NormEps)
	case c.Window < 0:
		return fmt.Errorf("sliding_window %d must not be negative", c.Window)
	case c.Sliding != nil && len(c.Sliding) != c.Layers:
		return fmt.Errorf("%d layer types for %d layers", len(c.Sliding), c.Layers)
	case c.NoRoPE != nil && len(c.NoRoPE) != c.Layers:
		return fmt.Errorf("%d NoPE flags for %d layers", len(c.NoRoPE), c.Layers)
	case c.NoRoPE != nil && c.ModelType != "smollm3":
		return fmt.Errorf("layers without rotary embeddings are part of smollm3 only, not %s", c.ModelType)
	case c.Sliding != nil && !c.Sandwich:
		return fmt.Errorf("per-layer sliding windows are part of gemma2 and gemma3_text only, not %s", c.ModelType)
	case !(c.QueryScale >= 0 && c.AttnSoftcap >= 0 && c.FinalSoftcap >= 0) ||
		math.IsInf(c.QueryScale+c.AttnSoftcap+c.FinalSoftcap, 0):
		return fmt.Errorf("query_pre_attn_scalar %g and the soft-capping values %g, %g must be finite and not negative",
			c.QueryScale, c.AttnSoftcap, c.FinalSoftcap)
	case !c.Sandwich && c.QueryScale != 0:
		return fmt.Errorf("query_pre_attn_scalar is part of gemma2 and gemma3_text only, not %s", c.ModelType)
	case !c.Sandwich && (c.AttnSoftcap != 0 || c.FinalSoftcap != 0):
		return fmt.Errorf("logit soft-capping is part of gemma2 and gemma3_text only, not %s", c.ModelType)
	}
	return c.checkRope()
}

// checkRope checks a rope scaling against the head size.
func (c *Config) checkRope() error {
	rs := c.RopeScaling
	if rs == nil {
		return nil
	}
	if c.Family() == GPT2 {
		return errors.New("gpt2 has no rotary embeddings to scale")
	}
	switch rs.Type {
	case "linear", "llama3", "dynamic", "yarn":
		if !(rs.Factor > 0) || math.IsInf(rs.Factor, 0) {
			return fmt.Errorf("rope_scaling %s needs a positive factor", rs.Type)
		}
		if rs.Type == "yarn" && (!(rs.AttentionFactor > 0) || rs.OriginalMaxPos <= 0 || !(rs.BetaFast > 0) || !(rs.BetaSlow > 0)) {
			return fmt.Errorf("rope_scaling yarn: attention_factor %g, original_max_position_embeddings %d, beta_fast %g and beta_slow %g must be positive",
				rs.AttentionFactor, rs.OriginalMaxPos, rs.BetaFast, rs.BetaSlow)
		}
	case "longrope":
		half := c.Rotary() / 2
		if len(rs.ShortFactor) != half || len(rs.LongFactor) != half {
			return fmt.Errorf("rope_scaling longrope: short_factor and long_factor need %d values each (half the %d rotated dimensions), have %d and %d",
				half, c.Rotary(), len(rs.ShortFactor), len(rs.LongFactor))
		}
		for _, x := range slices.Concat(rs.ShortFactor, rs.LongFactor) {
			if !(x > 0) || math.IsInf(x, 0) {
				return fmt.Errorf("rope_scaling longrope: factor %g must be positive", x)
			}
		}
		if !(rs.AttentionFactor > 0) || math.IsInf(rs.AttentionFactor, 0) || rs.OriginalMaxPos <= 0 {
			return fmt.Errorf("rope_scaling longrope: attention_factor %g and original_max_position_embeddings %d must be positive",
				rs.AttentionFactor, rs.OriginalMaxPos)
		}
	default:
		return fmt.Errorf("rope_scaling type %q is not supported (default, linear, llama3, dynamic, yarn, longrope)", rs.Type)
	}
	return nil
}

// InvFreq returns RoPE's inverse frequencies theta^(−2i/R), i < R/2 for the R = Rotary()
// rotated dimensions, after the configured rope scaling, for forwards within the original
// context (see InvFreqAt).
func (c *Config) InvFreq() []float64 { return c.InvFreqAt(0) }

// RopeVariant names the RoPE table that a forward over positions [0, n) uses, as
// transformers picks it from the forward's length: 0 for InvFreq's; for longrope past the
// original context 1 (the long factors); for dynamic NTK past MaxPos, n (the base grows
// with the length). Tables of one variant are the same whatever n.
func (c *Config) RopeVariant(n int) int {
	switch rs := c.RopeScaling; {
	case rs == nil:
	case rs.Type == "longrope" && n > rs.OriginalMaxPos:
		return 1
	case rs.Type == "dynamic" && n > c.MaxPos:
		return n
	}
	return 0
}

// InvFreqAt returns the inverse frequencies of a forward over positions [0, n).
func (c *Config) InvFreqAt(n int) []float64 {
	rs, rot := c.RopeScaling, c.Rotary()
	if rs != nil && rs.Type == "dynamic" && n > c.MaxPos {
		// NTK: the base raised so that the longest wavelength spans the longer context
		base := c.RopeTheta * math.Pow(rs.Factor*float64(n)/float64(c.MaxPos)-(rs.Factor-1), float64(rot)/float64(rot-2))
		return baseInvFreq(base, rot)
	}
	inv := baseInvFreq(c.RopeTheta, rot)
	if rs == nil {
		return inv
	}
	switch rs.Type {
	case "linear":
		for i := range inv {
			inv[i] /= rs.Factor
		}
	case "llama3":
		// Long wavelengths are slowed down by factor, short ones kept, the band between
		// interpolated smoothly (Llama 3.1's scheme).
		old := float64(rs.OriginalMaxPos)
		lowWave, highWave := old/rs.LowFreqFactor, old/rs.HighFreqFactor
		for i, f := range inv {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave:
			case wave > lowWave:
				inv[i] = f / rs.Factor
			default:
				s := (old/wave - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				inv[i] = (1-s)*f/rs.Factor + s*f
			}
		}
	case "yarn":
		// Dimensions that turn fewer than beta_slow times over the original context are
		// interpolated (divided by factor), those that turn more than beta_fast times kept,
		// with a linear ramp between the two.
		dim, base := float64(rot), c.RopeTheta
		turns := func(rotations float64) float64 {
			return dim * math.Log(float64(rs.OriginalMaxPos)/(rotations*2*math.Pi)) / (2 * math.Log(base))
		}
		low, high := turns(rs.BetaFast), turns(rs.BetaSlow)
		if rs.Truncate == nil || *rs.Truncate {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = max(low, 0), min(high, dim-1)
		if low == high {
			high += 0.001
		}
		for i, f := range inv {
			ramp := min(max((float64(i)-low)/(high-low), 0), 1) // 0: extrapolate, 1: interpolate
			inv[i] = f/rs.Factor*ramp + f*(1-ramp)
		}
	case "longrope":
		// Each frequency slowed by its own factor: the short ones within the original
		// context, the long ones past it.
		factors := rs.ShortFactor
		if c.RopeVariant(n) == 1 {
			factors = rs.LongFactor
		}
		for i := range inv {
			inv[i] /= factors[i]
		}
	}
	return inv
}

// LocalInvFreq returns the inverse frequencies of the sliding layers' RoPE (gemma3's local
// base, unscaled), nil when they use InvFreq.
func (c *Config) LocalInvFreq() []float64 {
	if c.LocalRopeTheta == 0 {
		return nil
	}
	return baseInvFreq(c.LocalRopeTheta, c.Rotary())
}

func baseInvFreq(theta float64, rot int) []float64 {
	inv := make([]float64, rot/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(theta, float64(2*i)/float64(rot))
	}
	return inv
}

// fields reads typed values out of a decoded JSON object.
type fields map[string]any

func (f fields) lookup(keys ...string) (any, string, bool) {
	for _, k := range keys {
		if v, ok := f[k]; ok && v != nil {
			return v, k, true
		}
	}
	return nil, "", false
}

func (f fields) requiredInt(keys ...string) (int, error) {
	if _, _, ok := f.lookup(keys...); !ok {
		return 0, fmt.Errorf("missing %s", keys[0])
	}
	return f.optionalInt(0, keys...)
}

func (f fields) optionalInt(def int, keys ...string) (int, error) {
	v, k, ok := f.lookup(keys...)
	if !ok {
		return def, nil
	}
	n, isNum := v.(float64)
	if !isNum || n != math.Trunc(n) || math.Abs(n) > 1<<40 {
		return 0, fmt.Errorf("%s: want an integer, got %s", k, describeJSON(v))
	}
	return int(n), nil
}

// keyKinds gives the JSON type of each config.json key this package reads (null is always
// allowed: it means "absent"). A value of another type is an error naming the key, never a
// silent fall back to the default: "rope_theta": "500000" would otherwise run with 10000.
var keyKinds = map[string]string{
	"model_type": "string", "activation_function": "string", "hidden_act": "string",
	"hidden_activation": "string", "rope_type": "string", "type": "string",
	"vocab_size": "integer", "n_embd": "integer", "hidden_size": "integer", "n_layer": "integer",
	"num_hidden_layers": "integer", "n_head": "integer", "num_attention_heads": "integer",
	"n_positions": "integer", "n_ctx": "integer", "max_position_embeddings": "integer",
	"n_inner": "integer", "intermediate_size": "integer", "num_key_value_heads": "integer",
	"head_dim": "integer", "sliding_window": "integer", "original_max_position_embeddings": "integer",
	"sliding_window_pattern": "integer",
	"layer_norm_epsilon":     "number", "rms_norm_eps": "number", "rope_theta": "number",
	"partial_rotary_factor": "number", "factor": "number", "low_freq_factor": "number",
	"high_freq_factor": "number", "attention_factor": "number", "beta_fast": "number", "beta_slow": "number",
	"mscale": "number", "mscale_all_dim": "number", "truncate": "bool", "rope_local_base_freq": "number",
	"query_pre_attn_scalar": "number", "attn_logit_softcapping": "number", "final_logit_softcapping": "number",
	"tie_word_embeddings": "bool", "scale_attn_by_inverse_layer_idx": "bool", "scale_attn_weights": "bool",
	"attention_bias": "bool", "mlp_bias": "bool", "use_sliding_window": "bool", "use_bidirectional_attention": "bool",
	"rope_scaling": "object", "rope_parameters": "object", "full_attention": "object", "sliding_attention": "object",
	"short_factor": "numbers", "long_factor": "numbers", "layer_types": "strings", "no_rope_layers": "numbers",
	"no_rope_layer_interval": "integer",
}

// checkTypes checks the keys of raw (and of its rope tables) against keyKinds.
func checkTypes(raw map[string]any, prefix string) error {
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v, kind := raw[k], keyKinds[k]
		if v == nil || kind == "" {
			continue
		}
		ok := false
		switch n, isNum := v.(float64); kind {
		case "string":
			_, ok = v.(string)
		case "number":
			ok = isNum
		case "integer":
			ok = isNum && n == math.Trunc(n)
		case "bool":
			_, ok = v.(bool)
		case "numbers", "strings":
			var list []any
			if list, ok = v.([]any); ok {
				for _, x := range list {
					if kind == "numbers" {
						_, ok = x.(float64)
					} else {
						_, ok = x.(string)
					}
					if !ok {
						return fmt.Errorf("%s%s: want a list of %s, got %s in it", prefix, k, strings.TrimSuffix(kind, "s")+"s", describeJSON(x))
					}
				}
			}
		case "object":
			var sub map[string]any
			if sub, ok = v.(map[string]any); ok {
				if err := checkTypes(sub, prefix+k+"."); err != nil {
					return err
				}
			}
		}
		if !ok {
			want := map[string]string{"integer": "an integer", "object": "an object", "numbers": "a list of numbers",
				"strings": "a list of strings"}[kind]
			if want == "" {
				want = "a " + kind
			}
			return fmt.Errorf("%s%s: want %s, got %s", prefix, k, want, describeJSON(v))
		}
	}
	return nil
}

// describeJSON names a decoded JSON value with its type, so that "192" and 192 read apart.
func describeJSON(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case float64:
		return fmt.Sprintf("the number %v", v)
	}
	return fmt.Sprint(v)
}

func (f fields) float(key string, def float64) float64 {
	if v, ok := f[key].(float64); ok {
		return v
	}
	return def
}

func (f fields) bool(key string, def bool) bool {
	if v, ok := f[key].(bool); ok {
		return v
	}
	return def
}

func (f fields) string(key, def string) string {
	if v, ok := f[key].(string); ok {
		return v
	}
	return def
}

// numbers reads a list of numbers (its type already checked); absent or null is an error.
func (f fields) numbers(key string) ([]float64, error) {
	list, ok := f[key].([]any)
	if !ok {
		return nil, fmt.Errorf("missing %s", key)
	}
	out := make([]float64, len(list))
	for i, x := range list {
		out[i], _ = x.(float64)
	}
	return out, nil
}

// tokenID reads an optional id (null or absent: -1).
func (f fields) tokenID(key string) (int, error) {
	v, ok := f[key]
	if !ok || v == nil {
		return -1, nil
	}
	if l, isList := v.([]any); isList && len(l) > 0 {
		v = l[0]
	}
	n, isNum := v.(float64)
	if !isNum || n < 0 || n != math.Trunc(n) {
		return 0, fmt.Errorf("%s: want a token id, got %v", key, v)
	}
	return int(n), nil
}

// tokenIDs reads an id or a list of ids.
func (f fields) tokenIDs(key string) ([]int, error) {
	v, ok := f[key]
	if !ok || v == nil {
		return nil, nil
	}
	list, isList := v.([]any)
	if !isList {
		list = []any{v}
	}
	var ids []int
	for _, x := range list {
		n, isNum := x.(float64)
		if !isNum || n < 0 || n != math.Trunc(n) {
			return nil, fmt.Errorf("%s: want token ids, got %v", key, v)
		}
		ids = append(ids, int(n))
	}
	return ids, nil
}

// hfJSON is the config.json that Save writes: what Hugging Face transformers reads back
// into the same model.
func (c *Config) hfJSON() map[string]any {
	m := map[string]any{"model_type": c.ModelType, "vocab_size": c.Vocab, "torch_dtype": "float32",
		"tie_word_embeddings": c.TieEmbed}
	if c.BOS >= 0 {
		m["bos_token_id"] = c.BOS
	}
	switch len(c.EOS) {
	case 0:
	case 1:
		m["eos_token_id"] = c.EOS[0]
	default:
		m["eos_token_id"] = c.EOS
	}
	if c.Family() == GPT2 {
		m["architectures"] = []string{"GPT2LMHeadModel"}
		m["n_embd"], m["n_layer"], m["n_head"] = c.Dim, c.Layers, c.Heads
		m["n_positions"], m["n_ctx"], m["n_inner"] = c.MaxPos, c.MaxPos, c.Hidden
		m["layer_norm_epsilon"], m["activation_function"] = c.NormEps, "gelu_new"
		return m
	}
	m["architectures"] = []string{map[string]string{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
		"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "gemma": "GemmaForCausalLM",
		"gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM"}[c.ModelType]}
	m["hidden_size"], m["intermediate_size"] = c.Dim, c.Hidden
	m["num_hidden_layers"], m["num_attention_heads"], m["num_key_value_heads"] = c.Layers, c.Heads, c.KVHeads
	m["head_dim"], m["max_position_embeddings"] = c.HeadDim, c.MaxPos
	m["rms_norm_eps"], m["rope_theta"], m["hidden_act"] = c.NormEps, c.RopeTheta, "silu"
	if c.MLP == GeGLU {
		m["hidden_act"], m["hidden_activation"] = "gelu_pytorch_tanh", "gelu_pytorch_tanh"
	}
	if rs := c.RopeScaling; rs != nil && rs.Type == "longrope" {
		// Phi-3's own layout: the three keys older transformers insist on, the original
		// context at the top level, and factor and attention_factor only where they are
		// not what the sizes imply.
		sc := map[string]any{"type": "longrope", "rope_type": "longrope", "short_factor": rs.ShortFactor, "long_factor": rs.LongFactor}
		if factor := float64(c.MaxPos) / float64(rs.OriginalMaxPos); rs.Factor != factor {
			sc["factor"] = rs.Factor
		}
		def := 1.0
		if rs.Factor > 1 {
			def = math.Sqrt(1 + math.Log(rs.Factor)/math.Log(float64(rs.OriginalMaxPos)))
		}
		if rs.AttentionFactor != def {
			sc["attention_factor"] = rs.AttentionFactor
		}
		m["rope_scaling"], m["original_max_position_embeddings"] = sc, rs.OriginalMaxPos
	} else if rs != nil {
		m["rope_scaling"] = rs
	}
	if c.RotaryDim > 0 {
		m["partial_rotary_factor"] = float64(c.RotaryDim) / float64(c.HeadDim)
	}
	window := func() any {
		if c.Window > 0 {
			return c.Window
		}
		return nil
	}
	capped := func(v float64) any {
		if v > 0 {
			return v
		}
		return nil
	}
	switch c.ModelType {
	case "llama":
		m["attention_bias"], m["mlp_bias"] = c.QKVBias, c.MLPBias
	case "smollm3":
		m["attention_bias"], m["mlp_bias"], m["use_sliding_window"] = c.QKVBias, c.MLPBias, false
		rope := make([]int, c.Layers) // 1: the layer rotates q and k
		for l := range rope {
			if c.NoRoPE == nil || !c.NoRoPE[l] {
				rope[l] = 1
			}
		}
		m["no_rope_layers"] = rope
	case "mistral", "phi3":
		m["sliding_window"] = window()
	case "qwen2":
		m["use_sliding_window"] = false
	case "qwen3", "gemma", "olmo2":
		m["attention_bias"] = c.QKVBias
		if c.ModelType == "qwen3" {
			m["use_sliding_window"] = false
		}
	case "gemma2", "gemma3_text":
		m["attention_bias"] = c.QKVBias
		m["query_pre_attn_scalar"] = c.QueryScale
		if c.QueryScale == 0 {
			m["query_pre_attn_scalar"] = float64(c.HeadDim)
		}
		m["attn_logit_softcapping"], m["final_logit_softcapping"] = capped(c.AttnSoftcap), capped(c.FinalSoftcap)
		m["sliding_window"] = window()
		types := make([]string, c.Layers)
		for l := range types {
			types[l] = "full_attention"
			if c.local(l) {
				types[l] = "sliding_attention"
			}
		}
		m["layer_types"] = types
		if c.ModelType == "gemma3_text" {
			m["rope_local_base_freq"] = c.LocalRopeTheta
			if c.LocalRopeTheta == 0 {
				m["rope_local_base_freq"] = c.RopeTheta
			}
		}
	}
	return m
}
