package main

import (
	"fmt"
	"os"
)

// resolveModelDir picks the model folder a command runs on: the --model flag, else
// $RLHFSTATION_MODEL, else the built-in model.
func resolveModelDir(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if env := os.Getenv("RLHFSTATION_MODEL"); env != "" {
		return env, nil
	}
	return "", usagef("no model: give --model DIR (a Hugging Face model folder) or set RLHFSTATION_MODEL")
}

// modelFlagHelp is the -h text of every --model flag.
var modelFlagHelp = fmt.Sprintf("model `DIR`: a Hugging Face model folder (config.json, model.safetensors, tokenizer.json); default $RLHFSTATION_MODEL or the built-in model")
