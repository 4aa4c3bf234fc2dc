package quant

import (
	"encoding/json"
	"fmt"
)

// Config is the bitsandbytes 4-bit part of transformers' quantization_config (BitsAndBytesConfig)
// in a model's config.json.
type Config struct {
	QuantType    Type   // bnb_4bit_quant_type
	DoubleQuant  bool   // bnb_4bit_use_double_quant
	ComputeDType string // bnb_4bit_compute_dtype
	QuantStorage string // bnb_4bit_quant_storage
	SkipModules  []string
}

// NewConfig is the quantization_config for weights quantized with opt, computing in
// computeDType ("float32", "bfloat16"…).
func NewConfig(opt Options, computeDType string) Config {
	if computeDType == "" {
		computeDType = "float32"
	}
	return Config{QuantType: opt.Type, DoubleQuant: opt.DoubleQuant, ComputeDType: computeDType, QuantStorage: "uint8"}
}

// JSON returns the config as BitsAndBytesConfig.to_dict writes it (keys sorted by encoding/json).
func (c Config) JSON() map[string]any {
	var skip any // null: transformers' default (the LM head kept 16-bit)
	if c.SkipModules != nil {
		skip = c.SkipModules // complete as it is: [] quantizes the head too
	}
	return map[string]any{
		"quant_method":                     "bitsandbytes",
		"_load_in_4bit":                    true,
		"_load_in_8bit":                    false,
		"load_in_4bit":                     true,
		"load_in_8bit":                     false,
		"bnb_4bit_quant_type":              string(c.QuantType),
		"bnb_4bit_use_double_quant":        c.DoubleQuant,
		"bnb_4bit_compute_dtype":           c.ComputeDType,
		"bnb_4bit_quant_storage":           c.QuantStorage,
		"llm_int8_enable_fp32_cpu_offload": false,
		"llm_int8_has_fp16_weight":         false,
		"llm_int8_skip_modules":            skip,
		"llm_int8_threshold":               6.0,
	}
}

// rawConfig reads the fields that matter from a quantization_config.
type rawConfig struct {
	QuantMethod  string   `json:"quant_method"`
	LoadIn4bit   *bool    `json:"load_in_4bit"`
	LoadIn4bitU  *bool    `json:"_load_in_4bit"`
	LoadIn8bit   bool     `json:"load_in_8bit"`
	QuantType    *string  `json:"bnb_4bit_quant_type"`
	DoubleQuant  bool     `json:"bnb_4bit_use_double_quant"`
	ComputeDType string   `json:"bnb_4bit_compute_dtype"`
	QuantStorage string   `json:"bnb_4bit_quant_storage"`
	SkipModules  []string `json:"llm_int8_skip_modules"`
}

// IsQuantized reads a config.json and reports whether it declares bitsandbytes 4-bit weights.
// No quantization_config means false with no error; one this package cannot load (another
// method, 8-bit, a quant storage other than uint8) is an error saying which.
func IsQuantized(configJSON []byte) (Config, bool, error) {
	var top struct {
		Q *json.RawMessage `json:"quantization_config"`
	}
	if err := json.Unmarshal(configJSON, &top); err != nil {
		return Config{}, false, fmt.Errorf("quant: config.json: %v", err)
	}
	if top.Q == nil || string(*top.Q) == "null" {
		return Config{}, false, nil
	}
	var r rawConfig
	if err := json.Unmarshal(*top.Q, &r); err != nil {
		return Config{}, false, fmt.Errorf("quant: config.json: quantization_config: %v", err)
	}
	if r.QuantMethod != "bitsandbytes" {
		return Config{}, false, fmt.Errorf("quant: config.json: quantization_config.quant_method %q is not supported (only bitsandbytes 4-bit)", r.QuantMethod)
	}
	in4 := (r.LoadIn4bit != nil && *r.LoadIn4bit) || (r.LoadIn4bitU != nil && *r.LoadIn4bitU)
	if !in4 {
		if r.LoadIn8bit {
			return Config{}, false, fmt.Errorf("quant: config.json: quantization_config is bitsandbytes 8-bit (load_in_8bit), which is not supported; only 4-bit")
		}
		return Config{}, false, fmt.Errorf("quant: config.json: quantization_config is bitsandbytes but load_in_4bit is not true")
	}
	c := Config{QuantType: FP4, DoubleQuant: r.DoubleQuant, ComputeDType: r.ComputeDType, QuantStorage: r.QuantStorage, SkipModules: r.SkipModules}
	if r.QuantType != nil { // transformers' default is fp4
		t, err := ParseType(*r.QuantType)
		if err != nil {
			return Config{}, false, fmt.Errorf("quant: config.json: quantization_config.bnb_4bit_quant_type: %v", err)
		}
		c.QuantType = t
	}
	if c.QuantStorage == "" {
		c.QuantStorage = "uint8"
	}
	if c.QuantStorage != "uint8" {
		return Config{}, false, fmt.Errorf("quant: config.json: quantization_config.bnb_4bit_quant_storage %q is not supported (uint8 only)", c.QuantStorage)
	}
	if c.ComputeDType == "" {
		c.ComputeDType = "float32"
	}
	return c, true, nil
}
