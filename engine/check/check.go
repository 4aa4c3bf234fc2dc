// Package check describes what a run on a model folder would load, render and need, from the
// folder's metadata and the safetensors headers alone: no weight is read, so an 8B folder
// takes as long as a tiny one (`rlhfstation check`).
package check

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"rlhfstation/engine"
	"rlhfstation/engine/chat"
	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/quant"
)

// Source is one value and where it was read: the file and the key, or how it was derived.
type Source struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
	From  string `json:"from"`
}

// Tokenizer is what the folder's tokenizer says.
type Tokenizer struct {
	Path          string            `json:"path"`
	Tokens        int               `json:"tokens"`
	VocabSize     int               `json:"vocab_size"`
	Special       map[string]string `json:"special"`         // bos_token and the like, from tokenizer_config / special_tokens_map
	AddedByEncode []string          `json:"added_by_encode"` // what the tokenizer adds around a text
	Beyond        []string          `json:"beyond_vocab"`    // tokens whose id is ≥ vocab_size (a few)
}

// Template is the chat template and one rendering.
type Template struct {
	Source   string `json:"source"`
	Example  string `json:"example"`
	StartBOS bool   `json:"starts_with_bos"` // the rendering begins with the BOS token's text
}

// Fit is the default run's memory against one device.
type Fit struct {
	Device   string `json:"device"`
	Capacity int64  `json:"capacity_bytes"`
	Fits     bool   `json:"fits"`
	Advice   string `json:"advice,omitempty"` // what to lower when it does not fit
}

// Memory is a default run's estimate (the one a run's precheck makes) and where it fits.
type Memory struct {
	Settings string          `json:"settings"`
	Estimate engine.Estimate `json:"estimate"`
	Total    int64           `json:"total_bytes"`
	Fits     []Fit           `json:"devices"`
}

// Report is everything check says about a folder.
type Report struct {
	Dir        string            `json:"dir"`
	ModelType  string            `json:"model_type"`
	Family     string            `json:"family"`
	Sources    []Source          `json:"sources"`
	Weights    model.Tensors     `json:"weights"`
	Tokenizer  *Tokenizer        `json:"tokenizer"`
	Template   *Template         `json:"chat_template"`
	Generation model.GenDefaults `json:"generation"`
	Memory     Memory            `json:"memory"`
	Warnings   []string          `json:"warnings"`
}

// Folder checks the model folder dir. An error is what would stop a run from loading it (a
// config it cannot read, tensors of the wrong shape); what only limits it is a warning.
func Folder(dir string, memTotal int64) (*Report, error) {
	r := &Report{Dir: dir, Warnings: []string{}}
	cfgPath := filepath.Join(dir, "config.json")
	rawBytes, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("model folder %s: %w", dir, err)
	}
	mc, err := model.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	_ = json.Unmarshal(rawBytes, &raw) // LoadConfig read it
	qc, quantized, err := quant.IsQuantized(rawBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if r.Weights, err = model.ScanWeights(dir, mc); err != nil {
		return nil, err
	}
	if err := mc.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if r.Generation, err = model.ReadGenDefaults(dir); err != nil {
		return nil, err
	}
	r.ModelType, r.Family = mc.ModelType, string(mc.Family())
	r.Sources = sources(raw, mc, r.Generation, r.Weights, qc, quantized)
	if len(r.Weights.Absent) > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("weights absent: %s (metadata only; a run needs them)", strings.Join(r.Weights.Absent, ", ")))
	}
	if ts := r.Weights.TotalSize; ts > 0 && r.Weights.Bytes > 0 && ts != r.Weights.Bytes {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the index's total_size is %d bytes but the headers hold %d", ts, r.Weights.Bytes))
	}

	folder, err := chat.ReadFolder(dir)
	if err != nil {
		return nil, err
	}
	if err := r.tokenizer(dir, mc, folder); err != nil {
		return nil, err
	}
	if folder.Template != nil {
		t := &Template{Source: folder.Template.Source}
		msgs := []data.Message{{Role: "user", Content: "What is 7 times 8?"}}
		if t.Example, err = folder.Template.RenderPrompt(msgs, nil); err != nil {
			r.Warnings = append(r.Warnings, fmt.Sprintf("the chat template fails on one user message: %v", err))
		}
		if bos := folder.Tokens.Named["bos_token"]; bos != "" && strings.HasPrefix(t.Example, bos) {
			t.StartBOS = true
			if r.Tokenizer != nil && slicesContains(r.Tokenizer.AddedByEncode, bos) {
				r.Warnings = append(r.Warnings, fmt.Sprintf("the chat template writes %s and the tokenizer adds it too: a rendered prompt encoded with special tokens (tokenizer(apply_chat_template(...)) in Python) starts with two BOS; rlhfstation encodes rendered prompts without them", bos))
			}
		}
		r.Template = t
	} else {
		r.Warnings = append(r.Warnings, "no chat template: conversational data needs [data] chat_template")
	}

	c := config.Default()
	r.Memory = memory(mc, c, quantized, memTotal)
	return r, nil
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// tokenizer reads dir/tokenizer.json's facts; a folder without one gets a warning.
func (r *Report) tokenizer(dir string, mc *model.Config, folder chat.Folder) error {
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		r.Warnings = append(r.Warnings, "no tokenizer.json: a run needs it (tokenizer.model alone, SentencePiece's file, is not read)")
		return nil
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return err
	}
	t := &Tokenizer{Path: path, Tokens: tok.VocabSize(), VocabSize: mc.Vocab, Special: folder.Tokens.Named, AddedByEncode: []string{}}
	for _, id := range tok.Encode("", true).IDs {
		t.AddedByEncode = append(t.AddedByEncode, tok.Token(id))
	}
	for id := mc.Vocab; id < tok.VocabSize() && len(t.Beyond) < 8; id++ {
		t.Beyond = append(t.Beyond, tok.Token(id))
	}
	switch {
	case tok.VocabSize() > mc.Vocab:
		r.Warnings = append(r.Warnings, fmt.Sprintf("the tokenizer has %d tokens, the embedding %d rows: prompts holding %s are refused (logits cover the embedding's rows)",
			tok.VocabSize(), mc.Vocab, strings.Join(t.Beyond, ", ")))
	}
	for name, text := range folder.Tokens.Named {
		if _, ok := tok.TokenID(text); !ok {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s %q is not a token of tokenizer.json", name, text))
		}
	}
	r.Tokenizer = t
	return nil
}

// sources lists the values that differ between the forms checkpoints are published in, and
// the file and key each was read from.
func sources(raw map[string]any, mc *model.Config, g model.GenDefaults, w model.Tensors, qc quant.Config, quantized bool) []Source {
	var s []Source
	add := func(name string, v any, from string) { s = append(s, Source{Name: name, Value: v, From: from}) }
	key := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := raw[k]; ok && v != nil {
				return "config.json " + k
			}
		}
		return ""
	}
	params, _ := raw["rope_parameters"].(map[string]any)
	or := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	add("model_type", mc.ModelType, or(key("model_type"), "config.json n_embd/n_layer (GPT-2 before model_type)"))
	add("vocab_size", mc.Vocab, key("vocab_size"))
	add("hidden_size", mc.Dim, key("hidden_size", "n_embd"))
	add("num_hidden_layers", mc.Layers, key("num_hidden_layers", "n_layer"))
	add("num_attention_heads / num_key_value_heads", fmt.Sprintf("%d / %d", mc.Heads, mc.KVHeads), or(key("num_key_value_heads"), "config.json num_attention_heads (no GQA)"))
	add("head_dim", mc.HeadDim, or(key("head_dim"), "hidden_size / num_attention_heads, or the family's default"))
	add("context", mc.Context(), or(key("max_position_embeddings", "n_positions", "n_ctx"), "the family's default"))
	if mc.Family() == model.Llama {
		theta := or(key("rope_theta"), "")
		if theta == "" && params != nil {
			theta = "config.json rope_parameters.rope_theta"
			if _, ok := params["full_attention"]; ok {
				theta = "config.json rope_parameters.full_attention.rope_theta"
			}
		}
		add("rope_theta", mc.RopeTheta, or(theta, "the family's default"))
		if rs := mc.RopeScaling; rs != nil {
			from := "config.json rope_scaling"
			if raw["rope_scaling"] == nil {
				from = "config.json rope_parameters"
			}
			add("rope scaling", fmt.Sprintf("%s, factor %g", rs.Type, rs.Factor), from)
		}
		if mc.LocalRopeTheta > 0 {
			add("rope_theta of the sliding layers", mc.LocalRopeTheta, or(key("rope_local_base_freq"), "config.json rope_parameters.sliding_attention"))
		}
		if mc.Window > 0 {
			add("sliding_window", mc.Window, key("sliding_window"))
		}
	}
	tie := or(key("tie_word_embeddings"), "the family's default")
	if w.TiedHead && raw["tie_word_embeddings"] == false {
		tie = "config.json says false, but the weights have no lm_head.weight"
	}
	add("tie_word_embeddings", mc.TieEmbed, tie)
	add("dtype", or(str(raw["dtype"]), str(raw["torch_dtype"])), or(key("dtype", "torch_dtype"), "absent"))
	bos, eos := "config.json bos_token_id", "config.json eos_token_id"
	if raw["bos_token_id"] == nil && g.BOS != nil {
		bos = "generation_config.json bos_token_id"
	}
	if len(g.EOS) > 0 {
		eos = "generation_config.json eos_token_id (wins for generation)"
	}
	add("bos_token_id", mc.BOS, bos)
	add("eos_token_id", mc.EOS, eos)
	if quantized {
		add("quantization", fmt.Sprintf("bitsandbytes 4-bit %s, double quant %v, compute %s, skip %v", qc.QuantType, qc.DoubleQuant, qc.ComputeDType, qc.SkipModules),
			"config.json quantization_config")
	}
	return s
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// gb is a GPU size in bytes as the card is sold (binary gigabytes).
const gb = int64(1) << 30

// memory estimates a default run with the estimate a run's precheck makes
// (engine.EstimateMemory) and says where it fits; where it does not, it tries the lower
// settings in the order a user would (batch, generations, completion length) and names the
// first that fits.
func memory(mc *model.Config, c *config.Config, quantized bool, memTotal int64) Memory {
	est := engine.EstimateMemory(mc, c, quantized)
	m := Memory{Estimate: est, Total: est.Total(),
		Settings: fmt.Sprintf("quant %s, LoRA r %d, per_device_train_batch_size %d, num_generations %d, max_prompt_length %d, max_completion_length %d",
			c.Quant.Type, c.LoRA.R, c.PerDeviceTrainBatchSize, c.NumGenerations, c.MaxPromptLength, c.MaxCompletionLength)}
	devices := []struct {
		name string
		cap  int64
	}{{"cpu", memTotal}, {"gpu 24 GB", 24 * gb}, {"gpu 48 GB", 48 * gb}, {"gpu 80 GB", 80 * gb}}
	for _, d := range devices {
		if d.cap <= 0 {
			continue
		}
		f := Fit{Device: d.name, Capacity: d.cap, Fits: est.Least() <= d.cap*9/10}
		if !f.Fits {
			f.Advice = lower(mc, c, quantized, d.cap*9/10)
		}
		m.Fits = append(m.Fits, f)
	}
	return m
}

// lower names the first smaller setting that fits within limit.
func lower(mc *model.Config, c *config.Config, quantized bool, limit int64) string {
	try := *c
	var steps []string
	fits := func() bool { return engine.EstimateMemory(mc, &try, quantized).Least() <= limit }
	for try.PerDeviceTrainBatchSize > 1 {
		try.PerDeviceTrainBatchSize /= 2
		try.GradientAccumulationSteps *= 2
		if fits() {
			return fmt.Sprintf("fits with per_device_train_batch_size %d and gradient_accumulation_steps %d", try.PerDeviceTrainBatchSize, try.GradientAccumulationSteps)
		}
	}
	steps = append(steps, fmt.Sprintf("fits with per_device_train_batch_size %d", try.PerDeviceTrainBatchSize))
	for try.NumGenerations > 2 {
		try.NumGenerations /= 2
		if fits() {
			return strings.Join(append(steps, fmt.Sprintf("num_generations %d", try.NumGenerations)), ", ")
		}
	}
	steps = append(steps, fmt.Sprintf("num_generations %d", try.NumGenerations))
	for try.MaxCompletionLength > 16 {
		try.MaxCompletionLength /= 2
		try.MaxPromptLength = max(try.MaxPromptLength/2, 16)
		if fits() {
			return strings.Join(append(steps, fmt.Sprintf("max_prompt_length %d, max_completion_length %d", try.MaxPromptLength, try.MaxCompletionLength)), ", ")
		}
	}
	return "even batch 1, 2 generations and 16-token completions do not fit: use a smaller model"
}

// HostMemory is the machine's MemTotal from /proc/meminfo, 0 where it cannot be read.
func HostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return kb * 1024
		}
	}
	return 0
}
