package engine

import (
	"fmt"
	"math/rand/v2"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
)

// AttachAdapter loads a PEFT LoRA adapter folder (a checkpoint of a run, or any adapter that
// peft saved for this model) onto m: every module the adapter names gets its layer, with the
// adapter's r, alpha and rslora. It returns the adapter set.
func AttachAdapter(m *model.Model, dir string) (*lora.Set, error) {
	cfg, tensors, err := checkpoint.LoadAdapter(dir)
	if err != nil {
		return nil, err
	}
	if cfg.UseDoRA {
		return nil, fmt.Errorf("%s: DoRA adapters are not supported", dir)
	}
	for _, t := range tensors {
		if i := model.FirstNonFinite(t.Data); i >= 0 {
			return nil, fmt.Errorf("%s: adapter tensor %s holds %v at index %d: an adapter with non-finite weights computes nothing usable", dir, t.Name, t.Data[i], i)
		}
	}
	lc := lora.Config{R: cfg.R, Alpha: cfg.LoraAlpha, TargetModules: cfg.TargetModules, RSLoRA: cfg.UseRSLoRA}
	names := map[string]bool{}
	for _, t := range tensors {
		names[t.Name] = true
	}
	rng := rand.New(rand.NewPCG(0, 0))
	var layers []*lora.Layer
	for _, l := range m.Linears() {
		an, _ := lora.TensorNames(l.Name)
		if !names[an] {
			continue
		}
		ll, err := lora.NewLayer(m.Backend(), l.Name, l.In, l.Out, lc, rng)
		if err != nil {
			return nil, err
		}
		l.Adapter = &adapter{layer: ll}
		layers = append(layers, ll)
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("%s: the adapter's tensors match no module of this model (first: %s)", dir, firstName(tensors))
	}
	set := lora.NewSet(lc, layers)
	if err := set.Load(dir, tensors); err != nil {
		return nil, err
	}
	return set, nil
}

func firstName(ts []checkpoint.Tensor) string {
	if len(ts) == 0 {
		return "none"
	}
	return ts[0].Name
}
