package testmodel

// PublishedLayouts are config.json files of published checkpoints as their repositories hold
// them (keys, forms and sizes), for the folders the tests build: SmolLM2-135M-Instruct,
// Qwen2.5-0.5B-Instruct in its transformers 4 form and as transformers 5 re-saves it,
// gemma-3-270m-it, Llama-3.2-1B-Instruct.
func PublishedLayouts() map[string]map[string]any {
	gemmaTypes := make([]any, 18)
	for i := range gemmaTypes {
		gemmaTypes[i] = "sliding_attention"
		if (i+1)%6 == 0 {
			gemmaTypes[i] = "full_attention"
		}
	}
	qwenTypes := make([]any, 24)
	for i := range qwenTypes {
		qwenTypes[i] = "full_attention"
	}
	return map[string]map[string]any{
		"SmolLM2-135M-Instruct": {"architectures": []any{"LlamaForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"bos_token_id": 1, "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576,
			"initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": true,
			"max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 9,
			"num_hidden_layers": 30, "num_key_value_heads": 3, "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
			"rope_interleaved": false, "rope_scaling": nil, "rope_theta": 100000, "tie_word_embeddings": true,
			"torch_dtype": "bfloat16", "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 49152},
		"Qwen2.5-0.5B-Instruct": {"architectures": []any{"Qwen2ForCausalLM"}, "attention_dropout": 0.0, "bos_token_id": 151643,
			"eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
			"max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14,
			"num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
			"sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.43.1",
			"use_cache": true, "use_sliding_window": false, "vocab_size": 151936},
		"Qwen2.5-0.5B-Instruct-transformers5": {"architectures": []any{"Qwen2ForCausalLM"}, "attention_dropout": 0.0,
			"bos_token_id": 151643, "dtype": "bfloat16", "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896,
			"initializer_range": 0.02, "intermediate_size": 4864, "layer_types": qwenTypes, "max_position_embeddings": 32768,
			"max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
			"num_key_value_heads": 2, "pad_token_id": nil, "rms_norm_eps": 1e-06,
			"rope_parameters": map[string]any{"rope_theta": 1000000, "rope_type": "default"}, "sliding_window": nil,
			"tie_word_embeddings": true, "transformers_version": "5.0.0", "use_cache": true, "use_sliding_window": false,
			"vocab_size": 151936},
		"gemma-3-270m-it": {"_sliding_window_pattern": 6, "architectures": []any{"Gemma3ForCausalLM"}, "attention_bias": false,
			"attention_dropout": 0.0, "attn_logit_softcapping": nil, "bos_token_id": 2, "eos_token_id": []any{1, 106},
			"final_logit_softcapping": nil, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640,
			"initializer_range": 0.02, "intermediate_size": 2048, "layer_types": gemmaTypes, "max_position_embeddings": 32768,
			"model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 18, "num_key_value_heads": 1,
			"pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
			"rope_scaling": nil, "rope_theta": 1000000.0, "sliding_window": 512, "torch_dtype": "bfloat16",
			"transformers_version": "4.55.0.dev0", "use_bidirectional_attention": false, "use_cache": true, "vocab_size": 262144},
		"Llama-3.2-1B-Instruct": {"architectures": []any{"LlamaForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"bos_token_id": 128000, "eos_token_id": []any{128001, 128008, 128009}, "head_dim": 64, "hidden_act": "silu",
			"hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
			"mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
			"num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
			"rope_scaling": map[string]any{"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
				"original_max_position_embeddings": 8192, "rope_type": "llama3"},
			"rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.45.0.dev0",
			"use_cache": true, "vocab_size": 128256},
	}
}
