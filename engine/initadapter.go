package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/config"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/rewards"
)

// initAdapter is the PEFT LoRA adapter a new run starts from (init_adapter): another run's
// checkpoint, or any adapter peft saved for this model.
type initAdapter struct {
	dir     string
	cfg     checkpoint.AdapterConfig
	tensors []checkpoint.Tensor
	modules map[string]bool // the modules it adapts
}

// plainLoRA refuses adapters that are more than LoRA factors with one r and alpha: what
// neither training nor merging here can represent. verb says what is refused ("merged").
func plainLoRA(c checkpoint.AdapterConfig, cfgPath, verb string) error {
	switch {
	case c.UseDoRA:
		return fmt.Errorf("%s: DoRA adapters are not %s (use_dora is set)", cfgPath, verb)
	case len(c.RankPattern) > 0 || len(c.AlphaPattern) > 0:
		return fmt.Errorf("%s: rank_pattern and alpha_pattern (a rank or alpha per module) are not supported: adapters using them are not %s", cfgPath, verb)
	case c.Bias != "" && c.Bias != "none":
		return fmt.Errorf("%s: bias = %q: adapters with trained biases are not %s", cfgPath, c.Bias, verb)
	case len(c.ModulesToSave) > 0:
		return fmt.Errorf("%s: modules_to_save %v: adapters with fully trained modules are not %s", cfgPath, c.ModulesToSave, verb)
	case c.R < 1:
		return fmt.Errorf("%s: r = %d", cfgPath, c.R)
	}
	return nil
}

// readInitAdapter reads the adapter folder dir and sets the run's [lora] r, lora_alpha and
// use_rslora from its adapter_config.json (a note in notes for each value it changes).
// Nothing here needs the model: the base and the shapes are checked by checkInitAdapter
// and attachAdapters.
func readInitAdapter(c *config.Config, dir string, note func(format string, a ...any)) (*initAdapter, error) {
	cfg, tensors, err := checkpoint.LoadAdapter(dir)
	if err != nil {
		return nil, fmt.Errorf("init_adapter: %w", err)
	}
	cfgPath := filepath.Join(dir, checkpoint.AdapterConfigFile)
	if err := plainLoRA(cfg, cfgPath, "trained from"); err != nil {
		return nil, fmt.Errorf("init_adapter: %w", err)
	}
	ia := &initAdapter{dir: dir, cfg: cfg, tensors: tensors, modules: map[string]bool{}}
	for _, t := range tensors {
		if i := model.FirstNonFinite(t.Data); i >= 0 {
			return nil, fmt.Errorf("init_adapter %s: tensor %s holds %v at index %d", dir, t.Name, t.Data[i], i)
		}
		mod, ok := loraModule(t.Name)
		if !ok {
			return nil, fmt.Errorf("init_adapter %s: tensor %s is not a LoRA factor (base_model.model.<module>.lora_A.weight or .lora_B.weight)", dir, t.Name)
		}
		ia.modules[mod] = true
	}
	if len(ia.modules) == 0 {
		return nil, fmt.Errorf("init_adapter %s: the adapter holds no tensor", dir)
	}
	set := func(key string, old, new any) {
		if fmt.Sprint(old) != fmt.Sprint(new) {
			note("lora.%s = %v (%s) replaced by the init adapter's %v", key, old, c.Origin("lora."+key), new)
		}
	}
	set("r", c.LoRA.R, cfg.R)
	set("lora_alpha", c.LoRA.Alpha, cfg.LoraAlpha)
	set("use_rslora", c.LoRA.UseRSLoRA, cfg.UseRSLoRA)
	c.LoRA.R, c.LoRA.Alpha, c.LoRA.UseRSLoRA = cfg.R, cfg.LoraAlpha, cfg.UseRSLoRA
	return ia, nil
}

// loraModule is the module of a PEFT LoRA tensor name.
func loraModule(name string) (string, bool) {
	for _, suffix := range []string{".lora_A.weight", ".lora_B.weight"} {
		if m, ok := strings.CutSuffix(name, suffix); ok {
			return strings.TrimPrefix(m, "base_model.model."), true
		}
	}
	return "", false
}

// targets sets the run's target_modules to the modules the adapter holds: its own
// target_modules where they select exactly those modules of m, else the modules' full names
// (an adapter on some layers only, or one whose targets are a regular expression), so that a
// resume from this run's config.toml adapts the same modules.
func (ia *initAdapter) targets(c *config.Config, m *model.Model, note func(format string, a ...any)) error {
	var names []string
	for _, l := range m.Linears() {
		if ia.modules[l.Name] {
			names = append(names, l.Name)
		}
	}
	for mod := range ia.modules {
		if !slices.Contains(names, mod) {
			return fmt.Errorf("init_adapter %s: the adapter's module %s is not a linear layer of this model (its modules are named like %s)",
				ia.dir, mod, m.Linears()[0].Name)
		}
	}
	own := true
	for _, l := range m.Linears() {
		own = own && lora.Selects(ia.cfg.TargetModules, l.Name) == ia.modules[l.Name]
	}
	targets := config.Modules(names)
	if own && len(ia.cfg.TargetModules) > 0 {
		targets = config.Modules(ia.cfg.TargetModules)
	}
	if !slices.Equal(targets, c.LoRA.TargetModules) {
		note("lora.target_modules = %v (%s) replaced by the init adapter's %d modules", []string(c.LoRA.TargetModules), c.Origin("lora.target_modules"), len(names))
	}
	c.LoRA.TargetModules = targets
	return nil
}

// checkBase refuses an adapter trained on another model. The adapter names its base in
// base_model_name_or_path ("built-in" for the built-in model, a folder for a run of this tool
// on one); where that is no folder here and the adapter lies in a run folder of this tool
// (checkpoints/step-N/, the run's config.toml two levels up), the run's model is its base.
// When the base is a folder other than modelDir, the two must hold the same weights and
// tokenizer. A base that is not a folder here (a hub id) cannot be compared: only the shapes
// are.
func (ia *initAdapter) checkBase(modelDir string, note func(format string, a ...any)) error {
	base, from := ia.cfg.BaseModel, filepath.Join(ia.dir, checkpoint.AdapterConfigFile)+" base_model_name_or_path"
	if !isDir(base) && base != BuiltinModelName {
		runCfg := filepath.Join(ia.dir, "..", "..", "config.toml")
		if rc, err := config.Load(runCfg); err == nil {
			base, from = rc.Model, runCfg
			if base == "" {
				base = BuiltinModelName
			}
		}
	}
	if base == BuiltinModelName {
		dir, err := builtin.Dir()
		if err != nil {
			return err
		}
		base = dir
	}
	if !isDir(base) {
		note("init_adapter %s: its base %q (%s) is not a folder here; only its shapes are checked against %s", ia.dir, ia.cfg.BaseModel, from, modelDir)
		return nil
	}
	if sameFile(base, modelDir) {
		return nil
	}
	hb, tb, err := rewards.FolderHashes(base)
	if err != nil {
		return fmt.Errorf("init_adapter %s: its base %s (%s): %w", ia.dir, base, from, err)
	}
	hm, tm, err := rewards.FolderHashes(modelDir)
	if err != nil {
		return err
	}
	if hb != hm || tb != tm {
		return fmt.Errorf("init_adapter %s was trained on %s (%s), not on this run's model %s: their weights or tokenizers differ",
			ia.dir, base, from, modelDir)
	}
	return nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return p != "" && err == nil && st.IsDir()
}

// sameFile reports whether two paths name the same folder.
func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}
