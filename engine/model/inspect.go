package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"rlhfstation/safetensors"
)

// Tensors describes a folder's weights from the safetensors headers alone: no tensor is read,
// so it costs the same for an 8B folder as for a tiny one.
type Tensors struct {
	Files     []string `json:"files"`      // weight files present
	Absent    []string `json:"absent"`     // shards the index names that the folder lacks
	Count     int      `json:"tensors"`    // tensors in the headers (or the index, without the shards)
	Bytes     int64    `json:"bytes"`      // their data bytes
	TotalSize int64    `json:"total_size"` // the index's metadata.total_size, 0 without one
	Params    int64    `json:"parameters"` // what the config's layout holds
	Quantized int      `json:"quantized"`  // linears stored 4-bit
	// QuantizedHead: lm_head.weight is stored 4-bit (bitsandbytes' layout), loaded as Model.HeadQ
	QuantizedHead bool     `json:"quantized_head"`
	TiedHead      bool     `json:"tied_head"`       // no lm_head.weight: the head is the embedding
	Unused        []string `json:"unused"`          // tensors the model does not read (a few)
	DTypes        []string `json:"dtypes"`          // the stored dtypes
	Index         string   `json:"index,omitempty"` // the index file, "" for a single file
}

// ScanWeights checks the weight files of dir against the layout of c from their headers: every
// tensor the model reads is present with its shape (4-bit linears by their quant state). A
// folder without weight files, or whose index names absent shards, is described, not refused:
// Files and Absent say what is there. It sets c.TieEmbed as Load does.
func ScanWeights(dir string, c *Config) (Tensors, error) {
	var t Tensors
	specs := layout(c)
	index := filepath.Join(dir, safetensors.IndexFile)
	if raw, err := os.ReadFile(index); err == nil {
		t.Index = index
		var idx struct {
			Metadata  map[string]any    `json:"metadata"`
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			return t, fmt.Errorf("%s: %v", index, err)
		}
		switch v := idx.Metadata["total_size"].(type) {
		case float64:
			t.TotalSize = int64(v)
		case string: // some writers store it as a string
			t.TotalSize, _ = strconv.ParseInt(v, 10, 64)
		}
		shards := map[string]bool{}
		for _, s := range idx.WeightMap {
			shards[s] = true
		}
		for _, s := range slices.Sorted(maps.Keys(shards)) {
			if _, err := os.Stat(filepath.Join(dir, s)); err != nil {
				t.Absent = append(t.Absent, s)
			}
		}
		if len(t.Absent) > 0 { // the index alone: names, no shapes
			t.Count = len(idx.WeightMap)
			_, hasHead := idx.WeightMap["lm_head.weight"]
			t.TiedHead = c.TieEmbed || !hasHead
			c.TieEmbed = t.TiedHead
			t.Params = layoutParams(layout(c))
			return t, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return t, err
	} else if _, err := os.Stat(filepath.Join(dir, safetensors.SingleFile)); err != nil {
		t.Absent = []string{safetensors.SingleFile}
		t.TiedHead = c.TieEmbed
		t.Params = layoutParams(specs)
		return t, nil
	}
	set, err := safetensors.OpenSet(dir)
	if err != nil {
		return t, err
	}
	defer set.Close()
	dtypes := map[string]bool{}
	for _, f := range set.Files {
		t.Files = append(t.Files, f.Path)
	}
	for _, name := range set.Names() {
		info, _ := set.Info(name)
		t.Count++
		t.Bytes += info.End - info.Begin
		dtypes[string(info.DType)] = true
	}
	t.DTypes = slices.Sorted(maps.Keys(dtypes))
	if !c.TieEmbed {
		if _, ok := set.Info("lm_head.weight"); !ok {
			c.TieEmbed = true
		}
	}
	t.TiedHead = c.TieEmbed
	specs = layout(c)
	t.Params = layoutParams(specs)
	used := map[string]bool{}
	for _, sp := range specs {
		if sp.linear || sp.name == "lm_head.weight" {
			base := strings.TrimSuffix(sp.name, ".weight")
			if _, ok := set.Info(base + ".weight.absmax"); ok {
				if sp.linear {
					t.Quantized++
				} else {
					t.QuantizedHead = true
				}
				for _, n := range set.Names() {
					if strings.HasPrefix(n, base+".weight") {
						used[n] = true
					}
				}
				continue
			}
		}
		name, err := findTensor(set, sp, dir)
		if err != nil {
			return t, err
		}
		used[name] = true
	}
	for _, n := range set.Names() {
		if !used[n] && len(t.Unused) < 8 {
			t.Unused = append(t.Unused, n)
		}
	}
	return t, nil
}

func layoutParams(specs []paramSpec) int64 {
	var n int64
	for _, sp := range specs {
		n += int64(numel(sp.shape))
	}
	return n
}

// TensorShape is one tensor of a checkpoint's layout, under its Hugging Face name.
type TensorShape struct {
	Name  string
	Shape []int // as stored: GPT-2's Conv1D weights [in, out]
}

// Layout lists the tensors a folder of config c holds, in the published names and shapes:
// what Load reads (the LM head only when untied).
func Layout(c *Config) []TensorShape {
	var out []TensorShape
	for _, sp := range layout(c) {
		shape := sp.shape
		if sp.conv1D {
			shape = []int{sp.shape[1], sp.shape[0]}
		}
		out = append(out, TensorShape{Name: sp.name, Shape: shape})
	}
	return out
}
