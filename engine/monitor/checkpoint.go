package monitor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/safetensors"
)

// peftPrefix starts every tensor name PEFT saves.
const peftPrefix = "base_model.model."

// patternValue finds a module's entry in PEFT's rank_pattern or alpha_pattern: a key matches
// when the module path, as a whole, matches (.*\.)?key. The longest matching key wins.
func patternValue[V any](pattern map[string]V, module string) (V, bool) {
	var best V
	bestLen, found := -1, false
	for key, v := range pattern {
		re, err := regexp.Compile(`^(?:.*\.)?(?:` + key + `)$`)
		if err != nil || !re.MatchString(module) {
			continue
		}
		if len(key) > bestLen {
			best, bestLen, found = v, len(key), true
		}
	}
	return best, found
}

// moduleTensors names one LoRA module's two tensors in the adapter file.
type moduleTensors struct {
	Path         string // the module inside the model: model.layers.0.self_attn.q_proj
	AName, BName string
}

// folder is an opened checkpoint folder.
type folder struct {
	dir       string
	cfg       *checkpoint.AdapterConfig // nil when adapter_config.json is absent
	adapter   *safetensors.File
	modules   []moduleTensors
	other     []string // tensors that are not LoRA factors
	malformed []string // "tensor: why"
	trainer   *checkpoint.TrainerState
	trainErr  error
	optPath   string   // "" when there is no optimizer file
	skipped   []string // files not read: PyTorch pickles
	foreign   bool     // written by another tool (the Hugging Face Trainer…): no resume from here
}

// pickleSuffixes mark files that are PyTorch pickles (or zip archives of them): loading one
// runs code, so the inspector names them and reads none.
var pickleSuffixes = []string{".pt", ".pth", ".bin", ".pkl", ".pickle"}

// foreignFiles are files the Hugging Face Trainer (TRL, Unsloth) saves beside the adapter.
var foreignFiles = []string{"optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"}

func (c *folder) close() {
	if c.adapter != nil {
		c.adapter.Close()
	}
}

// openCheckpoint reads a checkpoint folder's headers and small files; dir may also name the
// adapter_model.safetensors inside it. Problems that still leave something to inspect (an
// optional file unreadable, a config missing) are kept for the report; the rest are errors.
func openCheckpoint(dir string) (*folder, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	c := &folder{dir: dir}
	adapterPath := filepath.Join(dir, checkpoint.AdapterWeightsFile)
	if _, err := os.Stat(adapterPath); err != nil {
		if _, berr := os.Stat(filepath.Join(dir, "adapter_model.bin")); berr == nil {
			return nil, fmt.Errorf("checkpoint %s: only adapter_model.bin (a PyTorch pickle) is there; save the adapter with safe_serialization=True", dir)
		}
		return nil, fmt.Errorf("checkpoint %s: no %s: not a LoRA adapter folder", dir, checkpoint.AdapterWeightsFile)
	}
	cfgPath := filepath.Join(dir, checkpoint.AdapterConfigFile)
	if _, err := os.Stat(cfgPath); err == nil {
		cfg, err := checkpoint.ReadAdapterConfig(cfgPath)
		if err != nil {
			return nil, err
		}
		c.cfg = &cfg
	}
	if c.adapter, err = safetensors.Open(adapterPath); err != nil {
		return nil, err
	}
	c.indexTensors()
	if len(c.modules) == 0 {
		c.close()
		return nil, fmt.Errorf("%s: no LoRA tensors (names like %s<module>.lora_A.weight)", adapterPath, peftPrefix)
	}
	if _, err := os.Stat(filepath.Join(dir, checkpoint.TrainerStateFile)); err == nil {
		st, err := checkpoint.ReadTrainerState(filepath.Join(dir, checkpoint.TrainerStateFile))
		if err == nil {
			c.trainer = &st
		}
		c.trainErr = err
	}
	if _, err := os.Stat(filepath.Join(dir, checkpoint.OptimizerFile)); err == nil {
		c.optPath = filepath.Join(dir, checkpoint.OptimizerFile)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		for _, suf := range pickleSuffixes {
			if !e.IsDir() && strings.HasSuffix(e.Name(), suf) {
				c.skipped = append(c.skipped, e.Name())
				break
			}
		}
	}
	switch {
	case c.trainer != nil:
		c.foreign = !c.trainer.Own()
	default:
		for _, f := range foreignFiles {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				c.foreign = true
			}
		}
		c.foreign = c.foreign || checkpointFolder.MatchString(filepath.Base(dir))
	}
	return c, nil
}

// checkpointFolder is the Hugging Face Trainer's checkpoint folder name.
var checkpointFolder = regexp.MustCompile(`^checkpoint-(\d+)$`)

// splitLoRAName parses a PEFT tensor name into its module path and factor ("A" or "B"):
// base_model.model.<module>.lora_A.weight, also lora_A.<adapter>.weight and the embedding
// factors lora_embedding_A/B.
func splitLoRAName(name string) (module, factor string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(name, peftPrefix), ".")
	for i, p := range parts {
		switch p {
		case "lora_A", "lora_embedding_A":
			factor = "A"
		case "lora_B", "lora_embedding_B":
			factor = "B"
		default:
			continue
		}
		if i == 0 {
			return "", "", false
		}
		return strings.Join(parts[:i], "."), factor, true
	}
	return "", "", false
}

func (c *folder) indexTensors() {
	byModule := map[string]*moduleTensors{}
	for _, name := range c.adapter.Names() {
		mod, factor, ok := splitLoRAName(name)
		if !ok {
			c.other = append(c.other, name)
			continue
		}
		m := byModule[mod]
		if m == nil {
			m = &moduleTensors{Path: mod}
			byModule[mod] = m
		}
		if factor == "A" {
			m.AName = name
		} else {
			m.BName = name
		}
	}
	for _, m := range byModule {
		switch {
		case m.AName == "":
			c.malformed = append(c.malformed, m.BName+": lora_B without its lora_A")
		case m.BName == "":
			c.malformed = append(c.malformed, m.AName+": lora_A without its lora_B")
		default:
			c.modules = append(c.modules, *m)
		}
	}
	sort.Slice(c.modules, func(i, j int) bool { return naturalLess(c.modules[i].Path, c.modules[j].Path) })
	sort.Strings(c.malformed)
}

// naturalLess orders module paths with their numbers as numbers (layers.2 before layers.10).
func naturalLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] == pb[i] {
			continue
		}
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea == nil && eb == nil {
			return na < nb
		}
		return pa[i] < pb[i]
	}
	return len(pa) < len(pb)
}

// factorShapes reads a module's shapes: A [r, in…] and B [out, r, 1…] (convolutions flatten
// A's trailing dimensions into in).
func factorShapes(a, b []int) (r, in, out int, err error) {
	if len(a) < 2 || len(b) < 2 {
		return 0, 0, 0, fmt.Errorf("lora_A %v and lora_B %v must have at least 2 dimensions", a, b)
	}
	r, in, out = a[0], 1, b[0]
	for _, d := range a[1:] {
		in *= d
	}
	for _, d := range b[2:] {
		if d != 1 {
			return 0, 0, 0, fmt.Errorf("lora_B %v: trailing dimensions must be 1", b)
		}
	}
	if b[1] != r || r <= 0 {
		return 0, 0, 0, fmt.Errorf("rank mismatch: lora_A %v has r = %d, lora_B %v has %d", a, r, b, b[1])
	}
	return r, in, out, nil
}

// scaleFor is the module's s, from the config (rank_pattern and alpha_pattern included), or 1
// without a config.
func (c *folder) scaleFor(module string, r int) float64 {
	if c.cfg == nil {
		return 1
	}
	alpha := c.cfg.LoraAlpha
	if a, ok := patternValue(c.cfg.AlphaPattern, module); ok {
		alpha = a
	}
	return loraScale(alpha, r, c.cfg.UseRSLoRA)
}

// expectedRank is the module's r according to the config.
func (c *folder) expectedRank(module string) int {
	if r, ok := patternValue(c.cfg.RankPattern, module); ok {
		return r
	}
	return c.cfg.R
}

// loadFactor reads one module's factors, with non-finite entries zeroed and counted.
func (c *folder) loadFactor(m moduleTensors) (*loraFactor, int, int, error) {
	ia, _ := c.adapter.Info(m.AName)
	ib, _ := c.adapter.Info(m.BName)
	r, in, out, err := factorShapes(ia.Shape, ib.Shape)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%s: %v", m.Path, err)
	}
	a, _, err := c.adapter.Float32(m.AName)
	if err != nil {
		return nil, 0, 0, err
	}
	b, _, err := c.adapter.Float32(m.BName)
	if err != nil {
		return nil, 0, 0, err
	}
	nfA, nfB := zeroNonFinite(a), zeroNonFinite(b)
	return &loraFactor{A: a, B: b, R: r, In: in, Out: out, Scale: c.scaleFor(m.Path, r)}, nfA, nfB, nil
}

// parseIntMeta reads an integer of the safetensors metadata.
func parseIntMeta(meta map[string]string, key string) (int, bool) {
	v, ok := meta[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return n, err == nil
}

// parseFloatMeta reads a number of the safetensors metadata; ok says whether the key is there.
func parseFloatMeta(meta map[string]string, key string) (float64, bool, error) {
	v, ok := meta[key]
	if !ok {
		return 0, false, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return 0, true, errors.New(key + " = " + strconv.Quote(v) + " is not a number")
	}
	return f, true, nil
}
