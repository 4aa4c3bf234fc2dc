package pretrain

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"rlhfstation/internal/atomicfile"
	"rlhfstation/safetensors"
)

// Save writes the model as a complete Hugging Face folder: config.json,
// generation_config.json (EOS), model.safetensors in dtype, tokenizer.json,
// tokenizer_config.json, and pretrain.json (the options and, when res is not nil, the
// figures of the run). The folder is built beside dir and renamed over it, so dir is
// always either absent, the old folder, or the complete new one.
func (t *Trainer) Save(dir string, dtype safetensors.DType, res *Result) error {
	tmp, err := atomicfile.TempDir(dir)
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := t.Model.SaveAs(tmp, dtype); err != nil {
		return err
	}
	if err := t.Tokenizer.Save(filepath.Join(tmp, "tokenizer.json")); err != nil {
		return err
	}
	files := map[string]any{
		"generation_config.json": map[string]any{"eos_token_id": 0},
		// what transformers' AutoTokenizer needs to load tokenizer.json as it is
		"tokenizer_config.json": map[string]any{"tokenizer_class": "PreTrainedTokenizerFast",
			"eos_token": EOS, "model_max_length": t.Opts.Config.MaxPos, "add_bos_token": false},
		"pretrain.json": t.record(dtype, res),
	}
	for name, v := range files {
		js, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(filepath.Join(tmp, name), append(js, '\n'), 0o644); err != nil {
			return err
		}
	}
	return atomicfile.ReplaceDir(tmp, dir)
}

// record is pretrain.json: how the folder was made.
func (t *Trainer) record(dtype safetensors.DType, res *Result) map[string]any {
	o := t.Opts
	c := o.Config
	r := map[string]any{
		"model": map[string]any{"layers": c.Layers, "dim": c.Dim, "heads": c.Heads, "kv_heads": c.KVHeads,
			"hidden": c.Hidden, "vocab": c.Vocab, "context": c.MaxPos, "params": t.Model.NumParams(), "dtype": string(dtype)},
		"corpus": o.Corpus, "corpus_bytes": o.CorpusBytes, "val_bytes": o.ValBytes, "tokenizer_bytes": o.TokenizerBytes,
		"steps": o.Steps, "batch": o.Batch, "lr": o.LR, "warmup": o.Warmup, "schedule": "cosine",
		"weight_decay": o.WeightDecay, "clip": o.Clip, "seed": o.Seed, "eval_tokens": o.EvalTokens,
	}
	if o.Corpus != Synthetic && o.Corpus != SyntheticTools {
		r["corpus_bytes"], r["val_bytes"] = nil, nil
	}
	if o.From != "" {
		// continued pretraining: the record of the run it continued, where there is one
		r["from"], r["tokenizer_bytes"] = o.From, nil
		var prev any
		if b, err := os.ReadFile(filepath.Join(o.From, "pretrain.json")); err == nil && json.Unmarshal(b, &prev) == nil {
			r["continued_from"] = prev
		}
	}
	if res != nil {
		r["result"] = map[string]any{"steps": res.Steps, "train_loss": res.TrainLoss, "val_loss": res.ValLoss,
			"uniform_loss": res.UniformLoss, "tokens": res.Tokens, "seconds": res.Elapsed.Seconds(),
			"interrupted": res.Interrupted}
	}
	return r
}
