package model

import (
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
)

// ropeScalings are the RoPE scalings of published checkpoints, in the keys they are written
// with: the older "type" and transformers 5's rope_parameters included, rope_theta an integer
// where configs have it so. Each runs one sequence within the original context and one
// past it, where longrope switches to its long factors and dynamic NTK raises its base.
func ropeScalings() map[string]map[string]any {
	return map[string]map[string]any{
		"linear-type": {"rope_theta": 10000, "rope_scaling": map[string]any{"type": "linear", "factor": 2.0}},
		"llama3": {"rope_theta": 500000.0, "rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0,
			"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
		"dynamic": {"max_position_embeddings": 16, "rope_theta": 10000,
			"rope_scaling": map[string]any{"type": "dynamic", "factor": 4.0}},
		"yarn": {"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
			"rope_theta": 10000.0},
		"yarn-rope-parameters": {"rope_parameters": map[string]any{"rope_type": "yarn", "rope_theta": 1000000,
			"factor": 3.0, "original_max_position_embeddings": 4096, "beta_fast": 16.0, "beta_slow": 2.0,
			"mscale": 0.9, "mscale_all_dim": 0.7, "truncate": false}},
		"longrope": {"max_position_embeddings": 64, "original_max_position_embeddings": 16,
			"rope_scaling": map[string]any{"type": "longrope", "short_factor": []any{1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0, 3.5},
				"long_factor": []any{1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0}}},
	}
}

// TestRopeScalingsMatchReference: each scaling's logits, for a sequence within the original
// context and one past it, against testdata/reference.py (transformers' formulas in
// PyTorch, which picks the table by the forward's length as transformers does), within the
// families' 1e-4; and decoding past the original context over the cache matches a prefill
// of the whole sequence where the table does not depend on the length.
func TestRopeScalingsMatchReference(t *testing.T) {
	var names []string
	var jobs []refJob
	var seqs [][][]int
	for i, name := range slices.Sorted(maps.Keys(ropeScalings())) {
		cfg := map[string]any{"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
			"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
			"max_position_embeddings": 64, "rms_norm_eps": 1e-5, "tie_word_embeddings": true}
		maps.Copy(cfg, ropeScalings()[name])
		dir := filepath.Join(t.TempDir(), name)
		rng := rand.New(rand.NewPCG(uint64(i), 5))
		s := [][]int{randomIDs(rng, 12, 96), randomIDs(rng, 40, 96)}
		names, seqs = append(names, name), append(seqs, s)
		jobs = append(jobs, refJob{Make: &refMake{Dir: dir, Config: cfg, DType: "F32", Seed: uint64(300 + i)}, Model: dir, Seqs: s})
	}
	results := runReference(t, jobs)
	for k, name := range names {
		t.Run(name, func(t *testing.T) {
			m, err := Load(jobs[k].Model)
			if err != nil {
				t.Fatal(err)
			}
			V := m.Config.Vocab
			for s, seq := range seqs[k] {
				cache := m.NewCache(1, len(seq))
				got, err := m.Forward(cache, [][]int{seq}, false, AdaptersOn)
				cache.Free()
				if err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for i := range seq {
					worst = max(worst, relErr(got[i*V:(i+1)*V], results[k].Logits[s][i]))
				}
				if worst > 1e-4 {
					t.Errorf("sequence of %d tokens: logits off by %.2e relative, want ≤ 1e-4", len(seq), worst)
				}
			}
		})
	}
}

// TestRopeVariant: the table a forward uses follows its length only where transformers'
// does (longrope past the original context, dynamic NTK past max_position_embeddings).
func TestRopeVariant(t *testing.T) {
	for name, want := range map[string][3]int{"llama3": {0, 0, 0}, "yarn": {0, 0, 0}, "longrope": {0, 1, 1}, "dynamic": {0, 17, 40}} {
		cfg := map[string]any{"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
			"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 16, "max_position_embeddings": 64}
		maps.Copy(cfg, ropeScalings()[name])
		c, err := parseMap(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := [3]int{c.RopeVariant(16), c.RopeVariant(17), c.RopeVariant(40)}
		if got != want {
			t.Errorf("%s: variants %v at 16, 17, 40 positions, want %v", name, got, want)
		}
		if name == "dynamic" && c.Context() != 64 {
			t.Errorf("dynamic: context %d, want 16·4", c.Context())
		}
	}
}
