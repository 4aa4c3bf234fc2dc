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
)

// Family is the architecture a model_type belongs to.
type Family string

const (
	GPT2  Family = "gpt2"  // learned positions, LayerNorm, GELU (tanh), fused c_attn
	Llama Family = "llama" // RoPE, RMSNorm, SwiGLU, grouped-query attention (llama, mistral, qwen2)
)

// Config is the part of a Hugging Face config.json that the forward pass depends on.
type Config struct {
	ModelType string // gpt2, llama, mistral or qwen2
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
	Window      int  // sliding-window attention (mistral), 0 for none
	BOS         int  // beginning-of-sequence id, -1 when none
	EOS         []int
}

// RopeScaling is a rope_scaling entry; the types implemented are "linear" and "llama3".
type RopeScaling struct {
	Type           string  `json:"rope_type"`
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPos int     `json:"original_max_position_embeddings,omitempty"`
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

// LoadConfig reads dir/config.json and, when present, dir/generation_config.json (for its
// bos and eos ids).
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
		for _, id := range eos {
			if !slices.Contains(c.EOS, id) {
				c.EOS = append(c.EOS, id)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return c, nil
}

// ParseConfig reads the fields of a config.json and checks that this package implements
// everything they ask for: unknown model types, activations and rope scalings are errors
// rather than silently different results.
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
	c := &Config{ModelType: mt}
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
	switch mt {
	case "gpt2":
		req(&c.Vocab, "vocab_size")
		req(&c.Dim, "n_embd", "hidden_size")
		req(&c.Layers, "n_layer", "num_hidden_layers")
		req(&c.Heads, "n_head", "num_attention_heads")
		opt(&c.MaxPos, 1024, "n_positions", "n_ctx", "max_position_embeddings")
		opt(&c.Hidden, 4*c.Dim, "n_inner")
		c.KVHeads, c.HeadDim = c.Heads, 0
		c.NormEps = f.float("layer_norm_epsilon", 1e-5)
		c.QKVBias, c.OBias, c.MLPBias = true, true, true
		c.TieEmbed = f.bool("tie_word_embeddings", true)
		if act := f.string("activation_function", "gelu_new"); act != "gelu_new" && act != "gelu_pytorch_tanh" {
			return nil, fmt.Errorf("activation_function %q is not supported (gelu_new, gelu_pytorch_tanh)", act)
		}
		if f.bool("scale_attn_by_inverse_layer_idx", false) {
			return nil, errors.New("scale_attn_by_inverse_layer_idx is not supported")
		}
		if !f.bool("scale_attn_weights", true) {
			return nil, errors.New("scale_attn_weights=false is not supported")
		}
	case "llama", "mistral", "qwen2":
		req(&c.Vocab, "vocab_size")
		req(&c.Dim, "hidden_size")
		req(&c.Layers, "num_hidden_layers")
		req(&c.Heads, "num_attention_heads")
		req(&c.Hidden, "intermediate_size")
		opt(&c.KVHeads, c.Heads, "num_key_value_heads")
		opt(&c.HeadDim, 0, "head_dim")
		opt(&c.MaxPos, 2048, "max_position_embeddings")
		c.NormEps = f.float("rms_norm_eps", 1e-6)
		c.TieEmbed = f.bool("tie_word_embeddings", false)
		if act := f.string("hidden_act", "silu"); act != "silu" && act != "swish" {
			return nil, fmt.Errorf("hidden_act %q is not supported (silu)", act)
		}
		switch mt {
		case "llama": // attention_bias covers q, k, v and o; mlp_bias the three MLP linears
			c.QKVBias = f.bool("attention_bias", false)
			c.OBias, c.MLPBias = c.QKVBias, f.bool("mlp_bias", false)
		case "qwen2": // q, k, v always have a bias, o_proj and the MLP never
			c.QKVBias = true
			if f.bool("use_sliding_window", false) {
				return nil, errors.New("use_sliding_window=true is not supported")
			}
		case "mistral":
			opt(&c.Window, 0, "sliding_window")
		}
		if err == nil {
			err = c.parseRope(f)
		}
	case "":
		return nil, errors.New("no model_type")
	default:
		return nil, fmt.Errorf("model_type %q is not supported (gpt2, llama, mistral, qwen2)", mt)
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
	return c, c.Validate()
}

// parseRope reads rope_theta and rope_scaling, at the top level or inside rope_parameters.
func (c *Config) parseRope(f fields) error {
	params, _ := f["rope_parameters"].(map[string]any)
	pf := fields(params)
	c.RopeTheta = f.float("rope_theta", pf.float("rope_theta", 10000))
	if p := f.float("partial_rotary_factor", pf.float("partial_rotary_factor", 1)); p != 1 {
		return fmt.Errorf("partial_rotary_factor %g is not supported", p)
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
	default:
		return fmt.Errorf("rope_scaling type %q is not supported (default, linear, llama3)", typ)
	}
}

// Validate sets what the model type implies (which linears have a bias, GPT-2's head
// count) and the defaults of zero fields (HeadDim = Dim/Heads, KVHeads = Heads), and
// checks the sizes against each other.
func (c *Config) Validate() error {
	switch c.ModelType {
	case "gpt2":
		c.QKVBias, c.OBias, c.MLPBias, c.KVHeads = true, true, true, c.Heads
	case "llama":
		c.OBias = c.QKVBias
	case "qwen2":
		c.QKVBias, c.OBias, c.MLPBias = true, false, false
	case "mistral":
		c.QKVBias, c.OBias, c.MLPBias = false, false, false
	default:
		return fmt.Errorf("model_type %q is not supported (gpt2, llama, mistral, qwen2)", c.ModelType)
	}
	if c.Family() == GPT2 {
		c.Window = 0
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	switch {
	case c.Vocab <= 0 || c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.Hidden <= 0 || c.MaxPos <= 0:
		return fmt.Errorf("sizes must be positive (vocab %d, hidden %d, layers %d, heads %d, intermediate %d, context %d)",
			c.Vocab, c.Dim, c.Layers, c.Heads, c.Hidden, c.MaxPos)
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("num_key_value_heads %d does not divide num_attention_heads %d", c.KVHeads, c.Heads)
	case c.HeadDim <= 0:
		return fmt.Errorf("head_dim %d must be positive", c.HeadDim)
	case c.Family() == Llama && c.HeadDim%2 != 0:
		return fmt.Errorf("head_dim %d must be even for RoPE", c.HeadDim)
	case c.Family() == GPT2 && c.HeadDim*c.Heads != c.Dim:
		return fmt.Errorf("n_embd %d is not n_head %d × head size %d", c.Dim, c.Heads, c.HeadDim)
	case c.Family() == Llama && c.RopeTheta <= 0:
		return fmt.Errorf("rope_theta %g must be positive", c.RopeTheta)
	case c.NormEps <= 0:
		return fmt.Errorf("norm epsilon %g must be positive", c.NormEps)
	case c.Window < 0:
		return fmt.Errorf("sliding_window %d must not be negative", c.Window)
	}
	return nil
}

// InvFreq returns RoPE's inverse frequencies theta^(−2i/HeadDim), i < HeadDim/2, after
// the configured rope scaling.
func (c *Config) InvFreq() []float64 {
	half := c.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
	}
	rs := c.RopeScaling
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
	"rope_type": "string", "type": "string",
	"vocab_size": "integer", "n_embd": "integer", "hidden_size": "integer", "n_layer": "integer",
	"num_hidden_layers": "integer", "n_head": "integer", "num_attention_heads": "integer",
	"n_positions": "integer", "n_ctx": "integer", "max_position_embeddings": "integer",
	"n_inner": "integer", "intermediate_size": "integer", "num_key_value_heads": "integer",
	"head_dim": "integer", "sliding_window": "integer", "original_max_position_embeddings": "integer",
	"layer_norm_epsilon": "number", "rms_norm_eps": "number", "rope_theta": "number",
	"partial_rotary_factor": "number", "factor": "number", "low_freq_factor": "number",
	"high_freq_factor":    "number",
	"tie_word_embeddings": "bool", "scale_attn_by_inverse_layer_idx": "bool", "scale_attn_weights": "bool",
	"attention_bias": "bool", "mlp_bias": "bool", "use_sliding_window": "bool",
	"rope_scaling": "object", "rope_parameters": "object",
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
		case "object":
			var sub map[string]any
			if sub, ok = v.(map[string]any); ok {
				if err := checkTypes(sub, prefix+k+"."); err != nil {
					return err
				}
			}
		}
		if !ok {
			article := "a"
			if kind == "integer" || kind == "object" {
				article = "an"
			}
			return fmt.Errorf("%s%s: want %s %s, got %s", prefix, k, article, kind, describeJSON(v))
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
	m["architectures"] = []string{map[string]string{"llama": "LlamaForCausalLM",
		"mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}[c.ModelType]}
	m["hidden_size"], m["intermediate_size"] = c.Dim, c.Hidden
	m["num_hidden_layers"], m["num_attention_heads"], m["num_key_value_heads"] = c.Layers, c.Heads, c.KVHeads
	m["head_dim"], m["max_position_embeddings"] = c.HeadDim, c.MaxPos
	m["rms_norm_eps"], m["rope_theta"], m["hidden_act"] = c.NormEps, c.RopeTheta, "silu"
	if c.RopeScaling != nil {
		m["rope_scaling"] = c.RopeScaling
	}
	switch c.ModelType {
	case "llama":
		m["attention_bias"], m["mlp_bias"] = c.QKVBias, c.MLPBias
	case "mistral":
		if c.Window > 0 {
			m["sliding_window"] = c.Window
		} else {
			m["sliding_window"] = nil
		}
	case "qwen2":
		m["use_sliding_window"] = false
	}
	return m
}
