package cli

// The model a command runs on: the --model, --adapter and --device flags, and loading what
// they name with a line on stderr saying what was loaded.

import (
	"flag"
	"fmt"
	"io"
	"time"

	"rlhfstation/engine"
	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/human"
)

// modelFlagHelp is the -h text of every --model flag.
const modelFlagHelp = "model `DIR`: a Hugging Face model folder (config.json, model.safetensors, tokenizer.json); default $RLHFSTATION_MODEL or the built-in model"

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

// load applies the device policy and opens the device, resolves the model folder, loads the model and tokenizer,
// quantizes the base's linears as a run does when quant names a type (nf4, fp4; "" keeps them
// as stored), makes it compute on the device and attaches the adapter when one is given. What
// it did is said on stderr.
func (f modelFlags) load(stderr io.Writer, quant string) (string, *model.Model, *tokenizer.Tokenizer, error) {
	dev, note, err := engine.OpenDevice(*f.device)
	if note != "" {
		fmt.Fprintln(stderr, note)
	}
	if err != nil {
		return "", nil, nil, err
	}
	dir, err := engine.ModelDir(*f.model)
	if err != nil {
		return "", nil, nil, err
	}
	start := time.Now()
	m, tok, err := engine.LoadModel(dir)
	if err != nil {
		return "", nil, nil, err
	}
	fmt.Fprintf(stderr, "loaded %s (%s, %s parameters, %s resident) in %.2fs\n", dir, m.Config.ModelType,
		human.Count(int64(m.NumParams())), human.Bytes(int64(m.ResidentBytes())), time.Since(start).Seconds())
	if quant != "" {
		q := config.Default().Quant
		q.Type = quant
		if _, _, err := engine.QuantizeLinears(m, q); err != nil {
			return "", nil, nil, err
		}
	}
	if err := m.Use(dev); err != nil {
		return "", nil, nil, err
	}
	if dev.Name() != "cpu" {
		fmt.Fprintf(stderr, "computing on %s\n", engine.DeviceLabel(dev))
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
