package runs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Checkpoint is a checkpoint folder of a run that holds a LoRA adapter.
type Checkpoint struct {
	Step int
	Path string
}

// stepFolder matches the checkpoint folders of the tools: rlhfstation's step-000100, the
// Hugging Face Trainer's checkpoint-100, verl's global_step_100.
var stepFolder = regexp.MustCompile(`^(?:step-|checkpoint-|global_step_)(\d+)$`)

// adapterPlaces are where a checkpoint folder may keep its adapter, relative to it.
var adapterPlaces = []string{".", "actor", filepath.Join("actor", "lora_adapter"), "lora_adapter"}

// Checkpoints lists the checkpoints of the run folder dir (up to three folders deep), by step:
// this tool's checkpoints/step-NNNNNN folders, and folders named as the other tools name their
// checkpoints that hold adapter_config.json or an adapter_model file (at their top, or in
// actor/ or lora_adapter/ subfolders). A folder
// that does not exist has none. Temporary folders of a save in progress (hidden) are skipped.
func Checkpoints(dir string) ([]Checkpoint, error) {
	if _, err := os.Stat(dir); err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []Checkpoint
	base := strings.Count(filepath.Clean(dir), string(filepath.Separator))
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			return fs.SkipDir
		}
		if m := stepFolder.FindStringSubmatch(d.Name()); m != nil {
			where, ok := adapterIn(p)
			if own := strings.HasPrefix(d.Name(), "step-") && filepath.Base(filepath.Dir(p)) == "checkpoints"; own && !ok {
				// This tool saves its checkpoints whole (renamed into place): one is there as
				// soon as its folder is, before its checkpoint event is logged.
				where, ok = p, true
			}
			if ok {
				n, _ := strconv.Atoi(m[1])
				out = append(out, Checkpoint{Step: n, Path: where})
			}
			return fs.SkipDir
		}
		if strings.Count(filepath.Clean(p), string(filepath.Separator))-base >= 3 {
			return fs.SkipDir
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Step != out[j].Step {
			return out[i].Step < out[j].Step
		}
		return out[i].Path < out[j].Path
	})
	return out, err
}

// adapterIn finds the folder of a checkpoint that holds its adapter.
func adapterIn(dir string) (string, bool) {
	for _, rel := range adapterPlaces {
		p := filepath.Join(dir, rel)
		for _, f := range []string{"adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"} {
			if _, err := os.Stat(filepath.Join(p, f)); err == nil {
				return filepath.Clean(p), true
			}
		}
	}
	return "", false
}
