package model

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseConfig: any config.json either loads into a configuration that validates and
// survives its own round trip through the config.json Save writes, or is refused with an
// error; nothing panics.
func FuzzParseConfig(f *testing.F) {
	for _, c := range tinyConfigs() {
		b, _ := json.Marshal(c.hfJSON())
		f.Add(b)
	}
	f.Add([]byte(`{"model_type":"llama","vocab_size":32000,"hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},"eos_token_id":[128001,128008,128009]}`))
	f.Add([]byte(`{"model_type":"gpt2","vocab_size":50257,"n_embd":768,"n_layer":12,"n_head":12,"n_inner":null}`))
	f.Add([]byte(`{"model_type":"qwen2","rope_parameters":{"rope_theta":1e6},"hidden_size":"192"}`))
	for _, m := range familyConfigs() {
		b, _ := json.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if err.Error() == "" || strings.Contains(err.Error(), "%!") {
				t.Fatalf("unreadable error %q", err)
			}
			return
		}
		if c.Vocab <= 0 || c.Dim <= 0 || c.Layers <= 0 || c.HeadDim <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 {
			t.Fatalf("accepted a config with impossible sizes: %+v", c)
		}
		back, err := json.Marshal(c.hfJSON())
		if err != nil {
			t.Fatalf("cannot write back %+v: %v", c, err)
		}
		c2, err := ParseConfig(back)
		if err != nil {
			t.Fatalf("own config.json refused: %v\n%s", err, back)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the sizes: %+v → %+v", c, c2)
		}
	})
}
