package quant

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestIsQuantized(t *testing.T) {
	written, err := json.Marshal(map[string]any{"model_type": "llama", "quantization_config": NewConfig(Default(), "bfloat16").JSON()})
	if err != nil {
		t.Fatal(err)
	}
	c, ok, err := IsQuantized(written)
	want := Config{QuantType: NF4, DoubleQuant: true, ComputeDType: "bfloat16", QuantStorage: "uint8"}
	if err != nil || !ok || !reflect.DeepEqual(c, want) {
		t.Errorf("round trip: %+v %v %v", c, ok, err)
	}
	for _, key := range []string{`"load_in_4bit":true`, `"bnb_4bit_quant_storage":"uint8"`, `"quant_method":"bitsandbytes"`, `"llm_int8_skip_modules":null`, `"_load_in_4bit":true`} {
		if !strings.Contains(string(written), key) {
			t.Errorf("written config lacks %s: %s", key, written)
		}
	}
	cases := []struct {
		js   string
		ok   bool
		want string
		typ  Type
	}{
		{`{"model_type": "gpt2"}`, false, "", ""},
		{`{"quantization_config": null}`, false, "", ""},
		{`{"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true}}`, true, "", FP4}, // transformers' default type
		{`{"quantization_config": {"quant_method": "bitsandbytes", "_load_in_4bit": true, "bnb_4bit_quant_type": "nf4"}}`, true, "", NF4},
		{`{"quantization_config": {"quant_method": "gptq", "bits": 4}}`, false, `quant_method "gptq" is not supported`, ""},
		{`{"quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": true}}`, false, "8-bit", ""},
		{`{"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": false}}`, false, "load_in_4bit is not true", ""},
		{`{"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "int4"}}`, false, `unknown quant_type "int4"`, ""},
		{`{"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_storage": "bfloat16"}}`, false, `quant_storage "bfloat16"`, ""},
		{`{"quantization_config": [1]}`, false, "quantization_config", ""},
		{`{`, false, "config.json", ""},
	}
	for _, c := range cases {
		got, ok, err := IsQuantized([]byte(c.js))
		if ok != c.ok || (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) || (ok && got.QuantType != c.typ) {
			t.Errorf("IsQuantized(%s) = %+v %v %v; want ok=%v err~%q type %q", c.js, got, ok, err, c.ok, c.want, c.typ)
		}
	}
}
