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

// builtinRunDefaults are the GRPO settings a run on the built-in model starts from: sizes that
// make `go run . --batch` a few minutes of real learning on two CPU cores.
var builtinRunDefaults = map[string]any{
	"max_steps":                   int64(150),
	"per_device_train_batch_size": int64(2),
	"num_generations":             int64(8),
	"max_completion_length":       int64(48),
	"max_prompt_length":           int64(128),
	"learning_rate":               5e-4,
	"logging_steps":               int64(1),
	"save_steps":                  int64(50),
}

// builtinModelDir is the built-in model's folder.
func builtinModelDir() (string, error) {
	return "", usagef("no model: give --model DIR (a Hugging Face model folder) or set RLHFSTATION_MODEL")
}
