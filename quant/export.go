package quant

// Writing a model folder back out as plain weights: 4-bit linears dequantized, every float
// tensor in one dtype, optionally changed on the way (a merged LoRA adapter).

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"rlhfstation/internal/atomicfile"
	"rlhfstation/safetensors"
)

// DefaultExportShardBytes is where ExportFolder starts a new shard: transformers'
// save_pretrained default max_shard_size, "5GB".
const DefaultExportShardBytes = 5_000_000_000

// ExportOptions say how ExportFolder writes.
type ExportOptions struct {
	// DType of every float tensor written: F32, F16 or BF16; "" for the model's own
	// (config.json's torch_dtype or dtype, float32 when it names none of the three).
	DType safetensors.DType
	// ShardBytes splits the weights into shards with an index above this size;
	// 0 for DefaultExportShardBytes.
	ShardBytes int64
	// Update, when set, may change the float tensors Wants names before they are converted,
	// in the layout written (GPT-2's Conv1D weights [in, out], as plain folders store them).
	Wants  func(name string) bool
	Update func(name string, data []float32, shape []int) error
	// Progress receives the files left out, and a line now and then for large models; nil for
	// none. Label starts its lines (the command's name; "export" when empty).
	Progress io.Writer
	Label    string
}

// ExportSummary is what ExportFolder did.
type ExportSummary struct {
	Model       string  `json:"model"`
	Out         string  `json:"out"`
	DType       string  `json:"dtype"`
	Tensors     int     `json:"tensors"`
	Dequantized int     `json:"tensors_dequantized"`
	Updated     int     `json:"tensors_updated"`
	Shards      int     `json:"shards"`
	Bytes       int64   `json:"bytes"`
	Files       int     `json:"files_copied"`
	Seconds     float64 `json:"seconds"`
}

// planned is one tensor of the output, and where its values come from.
type planned struct {
	name      string
	shape     []int
	dtype     safetensors.DType
	quantized bool // a bitsandbytes 4-bit weight, dequantized
	float     bool // converted to the output dtype (and offered to Update)
	bytes     int64
}

// torchDTypes are the output dtypes with config.json's names for them.
var torchDTypes = map[safetensors.DType]string{safetensors.F32: "float32", safetensors.F16: "float16", safetensors.BF16: "bfloat16"}

// ExportFolder writes the Hugging Face model folder dir into out as a plain folder:
// bitsandbytes 4-bit linears dequantized (GPT-2's back to the Conv1D layout [in, out]) and
// their quant state dropped, every float tensor in o.DType after o.Update, the weights in
// model.safetensors or, past o.ShardBytes, in shards with model.safetensors.index.json,
// config.json without quantization_config and with torch_dtype set, and the tokenizer and
// other small files copied. Shards are made and written one at a time, so memory holds one
// shard, not the model. out must not exist or be empty; it appears only when complete.
func ExportFolder(dir, out string, o ExportOptions) (ExportSummary, error) {
	start := time.Now()
	sum := ExportSummary{Model: dir, Out: out}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	if o.ShardBytes <= 0 {
		o.ShardBytes = DefaultExportShardBytes
	}
	cfgPath := filepath.Join(dir, "config.json")
	cfgRaw, err := os.ReadFile(cfgPath)
	if err != nil {
		return sum, err
	}
	cfg, err := decodeConfigJSON(cfgRaw)
	if err != nil {
		return sum, fmt.Errorf("%s: %v", cfgPath, err)
	}
	if _, _, err := IsQuantized(cfgRaw); err != nil {
		return sum, fmt.Errorf("%s: %v", cfgPath, err)
	}
	if o.DType == "" {
		o.DType = safetensors.F32
		for dt, name := range torchDTypes {
			if computeDType(cfg) == name {
				o.DType = dt
			}
		}
	}
	torchName, ok := torchDTypes[o.DType]
	if !ok {
		return sum, fmt.Errorf("dtype %s: want F32, F16 or BF16", o.DType)
	}
	sum.DType = torchName
	conv1D := cfg["model_type"] == "gpt2" // bitsandbytes stores GPT-2's linears transposed
	if err := checkOut(out); err != nil {
		return sum, err
	}
	set, err := safetensors.OpenSet(dir)
	if err != nil {
		return sum, err
	}
	defer set.Close()

	plan, err := planExport(set, o.DType, conv1D)
	if err != nil {
		return sum, err
	}
	shards := shardPlan(plan, o.ShardBytes)
	tmp, err := atomicfile.TempDir(out)
	if err != nil {
		return sum, err
	}
	defer os.RemoveAll(tmp) // a no-op once moved
	var total int64
	for _, p := range plan {
		total += p.bytes
	}
	label := o.Label
	if label == "" {
		label = "export"
	}
	prog := newQuantProgress(progress, label, total)
	weightMap := map[string]string{}
	meta := map[string]string{"format": "pt"}
	for i, sh := range shards {
		file := safetensors.SingleFile
		if len(shards) > 1 {
			file = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		tensors := make([]safetensors.Tensor, 0, len(sh))
		for _, p := range sh {
			t, updated, err := exportTensor(set, p, o, conv1D)
			if err != nil {
				return sum, err
			}
			tensors = append(tensors, t)
			weightMap[p.name] = file
			sum.Tensors++
			sum.Bytes += int64(len(t.Data))
			if p.quantized {
				sum.Dequantized++
			}
			if updated {
				sum.Updated++
			}
			prog.add(p.bytes)
		}
		if err := safetensors.Write(filepath.Join(tmp, file), tensors, meta); err != nil {
			return sum, err
		}
	}
	sum.Shards = len(shards)
	if len(shards) > 1 {
		err := writeJSON(filepath.Join(tmp, safetensors.IndexFile),
			map[string]any{"metadata": map[string]any{"total_size": sum.Bytes}, "weight_map": weightMap})
		if err != nil {
			return sum, err
		}
	}
	delete(cfg, "quantization_config")
	cfg["torch_dtype"] = torchName
	if _, ok := cfg["dtype"]; ok { // newer transformers write this name
		cfg["dtype"] = torchName
	}
	if err := writeJSON(filepath.Join(tmp, "config.json"), cfg); err != nil {
		return sum, err
	}
	if sum.Files, err = copyModelFiles(dir, tmp, progress, label); err != nil {
		return sum, err
	}
	if err := atomicfile.ReplaceDir(tmp, out); err != nil {
		return sum, err
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

// planExport lists the output tensors in name order: each 4-bit weight as one float tensor
// (its quant state left out), other float tensors in dtype, the rest as they are.
func planExport(set *safetensors.Set, dtype safetensors.DType, conv1D bool) ([]planned, error) {
	var plan []planned
	for _, name := range set.Names() {
		if IsStateKey(name) {
			continue
		}
		if strings.HasSuffix(name, ".weight") {
			w, ok, err := LoadWeight(set, strings.TrimSuffix(name, ".weight"))
			if err != nil {
				return nil, err
			}
			if ok {
				shape := []int{w.Rows, w.Cols}
				if conv1D {
					shape = []int{w.Cols, w.Rows}
				}
				plan = append(plan, planned{name: name, shape: shape, dtype: dtype, quantized: true, float: true,
					bytes: int64(w.Len() * dtype.Size())})
				continue
			}
		}
		info, _ := set.Info(name)
		p := planned{name: name, shape: info.Shape, dtype: info.DType, bytes: info.End - info.Begin}
		if _, isFloat := torchDTypes[info.DType]; isFloat {
			p.dtype, p.float, p.bytes = dtype, true, int64(info.NumElements()*dtype.Size())
		}
		plan = append(plan, p)
	}
	sort.Slice(plan, func(i, j int) bool { return plan[i].name < plan[j].name })
	return plan, nil
}

// shardPlan splits the tensors, in order, into shards of at most limit bytes (a tensor larger
// than limit gets a shard of its own), as save_pretrained does.
func shardPlan(plan []planned, limit int64) [][]planned {
	var shards [][]planned
	var size int64
	for _, p := range plan {
		if len(shards) == 0 || (size+p.bytes > limit && size > 0) {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], p)
		size += p.bytes
	}
	return shards
}

// exportTensor makes one output tensor. It reports whether o.Update was applied.
func exportTensor(set *safetensors.Set, p planned, o ExportOptions, conv1D bool) (safetensors.Tensor, bool, error) {
	wants := o.Update != nil && o.Wants != nil && o.Wants(p.name)
	if !p.float {
		b, err := set.Bytes(p.name)
		return safetensors.Tensor{Name: p.name, DType: p.dtype, Shape: p.shape, Data: b}, false, err
	}
	if info, _ := set.Info(p.name); !p.quantized && !wants && info.DType == p.dtype {
		b, err := set.Bytes(p.name) // already in the output dtype: a view of the mapped input
		return safetensors.Tensor{Name: p.name, DType: p.dtype, Shape: p.shape, Data: b}, false, err
	}
	var data []float32
	if p.quantized {
		w, _, err := LoadWeight(set, strings.TrimSuffix(p.name, ".weight"))
		if err != nil {
			return safetensors.Tensor{}, false, err
		}
		data = make([]float32, w.Len())
		w.Dequantize(data)
		if conv1D { // [out, in] → Conv1D's [in, out]
			t := make([]float32, len(data))
			for r := 0; r < w.Rows; r++ {
				for c := 0; c < w.Cols; c++ {
					t[c*w.Rows+r] = data[r*w.Cols+c]
				}
			}
			data = t
		}
	} else {
		var err error
		if data, _, err = set.Float32(p.name); err != nil {
			return safetensors.Tensor{}, false, err
		}
	}
	if wants {
		if err := o.Update(p.name, data, p.shape); err != nil {
			return safetensors.Tensor{}, false, err
		}
	}
	if i := firstNonFinite(data); i >= 0 {
		return safetensors.Tensor{}, false, fmt.Errorf("tensor %s: value %d is %v", p.name, i, data[i])
	}
	if p.dtype == safetensors.F16 {
		for i, v := range data {
			if math.Abs(float64(v)) > 65504 {
				return safetensors.Tensor{}, false, fmt.Errorf("tensor %s: value %d (%g) is beyond float16's range: write bf16 or f32", p.name, i, v)
			}
		}
	}
	var t safetensors.Tensor
	switch p.dtype {
	case safetensors.F16:
		t = safetensors.F16Tensor(p.name, p.shape, data)
	case safetensors.BF16:
		t = safetensors.BF16Tensor(p.name, p.shape, data)
	default:
		t = safetensors.F32Tensor(p.name, p.shape, data)
	}
	return t, wants, nil
}
