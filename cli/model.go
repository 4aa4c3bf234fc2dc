package cli

// The model a command runs on: the --model, --adapter and --device flags, resolving the folder
// and loading the model and its tokenizer.

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"rlhfstation/engine"
	"rlhfstation/engine/builtin"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
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
	return builtinModelDir()
}

// modelFlagHelp is the -h text of every --model flag.
var modelFlagHelp = fmt.Sprintf("model `DIR`: a Hugging Face model folder (config.json, model.safetensors, tokenizer.json); default $RLHFSTATION_MODEL or the built-in model")

// builtinRunDefaults are the GRPO settings a run on the built-in model starts from: sizes that
// make `go run . --batch` a few minutes of real learning on two CPU cores.
var builtinRunDefaults = map[string]any{
	"max_steps":                   int64(150),
	"per_device_train_batch_size": int64(4),
	"num_generations":             int64(8),
	"max_completion_length":       int64(48),
	"max_prompt_length":           int64(128),
	"learning_rate":               5e-4,
	"warmup_ratio":                0.1,
	"logging_steps":               int64(1),
	"save_steps":                  int64(50),
}

// builtinModelDir is the built-in model's folder.
func builtinModelDir() (string, error) {
	return builtin.Dir()
}

// modelFlags are the flags of every command that runs a model.
type modelFlags struct {
	model, adapter, device *string
}

func addModelFlags(fs *flag.FlagSet) modelFlags {
	return modelFlags{
		model:   fs.String("model", "", modelFlagHelp),
		adapter: fs.String("adapter", "", "apply the LoRA adapter in `CKPT` (a run's checkpoint or any PEFT LoRA adapter folder)"),
		device:  fs.String("device", "auto", "where to compute: `auto`, cpu or cuda"),
	}
}

// load resolves the model folder, checks the device, loads the model and tokenizer and
// attaches the adapter when one is given; what it did is said on stderr.
func (f modelFlags) load(stderr io.Writer) (string, *model.Model, *tokenizer.Tokenizer, error) {
	if err := checkDevice(*f.device, stderr); err != nil {
		return "", nil, nil, err
	}
	dir, err := resolveModelDir(*f.model)
	if err != nil {
		return "", nil, nil, err
	}
	m, tok, err := loadModel(dir, stderr)
	if err != nil {
		return "", nil, nil, err
	}
	if *f.adapter != "" {
		set, err := engine.AttachAdapter(m, *f.adapter)
		if err != nil {
			return "", nil, nil, err
		}
		fmt.Fprintf(stderr, "adapter %s: %d modules, r=%d\n", *f.adapter, len(set.Layers), set.Config.R)
	}
	return dir, m, tok, nil
}

// loadModel loads a model folder and its tokenizer, with one line on stderr saying how
// long it took.
func loadModel(dir string, stderr io.Writer) (*model.Model, *tokenizer.Tokenizer, error) {
	start := time.Now()
	m, err := model.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, nil, err
	}
	if tok.VocabSize() > m.Config.Vocab {
		return nil, nil, fmt.Errorf("%s: the tokenizer has %d tokens, the model's vocabulary only %d", dir, tok.VocabSize(), m.Config.Vocab)
	}
	fmt.Fprintf(stderr, "loaded %s (%s, %.1fM parameters, %.1f MiB resident) in %.2fs\n", dir, m.Config.ModelType,
		float64(m.NumParams())/1e6, float64(m.ResidentBytes())/(1<<20), time.Since(start).Seconds())
	return m, tok, nil
}

// checkDevice validates --device. This build computes on the CPU: cuda is refused with the
// reason, and auto says so once when the machine has an NVIDIA GPU it cannot use.
func checkDevice(d string, stderr io.Writer) error {
	switch d {
	case "cpu":
		return nil
	case "auto":
		if _, err := os.Stat("/dev/nvidia0"); err == nil {
			fmt.Fprintln(stderr, "device auto: using the CPU (this build has no CUDA backend yet)")
		}
		return nil
	case "cuda":
		return fmt.Errorf("--device cuda: this build has no CUDA backend yet; use --device cpu")
	}
	return usagef("--device must be auto, cpu or cuda (got %q)", d)
}
