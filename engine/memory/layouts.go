package memory

// Qwen05Config and Gemma270Config are the config.json of Qwen2.5-0.5B and gemma-3-270m as
// published, with the number of blocks left to fill (%d): the shapes the estimate is tested on
// here and against measured runs in the engine's tests.
const (
	Qwen05Config = `{"architectures":["Qwen2ForCausalLM"],"bos_token_id":151643,"eos_token_id":151643,"hidden_act":"silu",
"hidden_size":896,"intermediate_size":4864,"max_position_embeddings":32768,"max_window_layers":24,"model_type":"qwen2",
"num_attention_heads":14,"num_hidden_layers":%d,"num_key_value_heads":2,"rms_norm_eps":1e-06,"rope_theta":1000000.0,
"sliding_window":32768,"tie_word_embeddings":true,"torch_dtype":"bfloat16","use_sliding_window":false,"vocab_size":151936}`
	Gemma270Config = `{"architectures":["Gemma3ForCausalLM"],"attention_bias":false,"bos_token_id":2,"eos_token_id":1,"head_dim":256,
"hidden_activation":"gelu_pytorch_tanh","hidden_size":640,"intermediate_size":2048,"max_position_embeddings":32768,
"model_type":"gemma3_text","num_attention_heads":4,"num_hidden_layers":%d,"num_key_value_heads":1,"pad_token_id":0,
"query_pre_attn_scalar":256,"rms_norm_eps":1e-06,"rope_local_base_freq":10000.0,"rope_theta":1000000.0,
"sliding_window":512,"torch_dtype":"bfloat16","vocab_size":262144}`
)
