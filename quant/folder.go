package quant

// Quantizing a whole model folder: the files bitsandbytes and transformers load.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"rlhfstation/internal/atomicfile"
	"rlhfstation/internal/human"
	"rlhfstation/safetensors"
)

// FolderSummary is what QuantizeFolder did: its --json document in `rlhfstation quantize`.
type FolderSummary struct {
	Model            string  `json:"model"`
	Out              string  `json:"out"`
	QuantType        string  `json:"quant_type"`
	BlockSize        int     `json:"blocksize"`
	DoubleQuant      bool    `json:"double_quant"`
	Quantized        int     `json:"tensors_quantized"`
	Kept             int     `json:"tensors_kept"`
	QuantizedParams  int64   `json:"quantized_parameters"`
	BytesBefore      int64   `json:"bytes_before"`
	BytesAfter       int64   `json:"bytes_after"`
	QuantizedBefore  int64   `json:"quantized_bytes_before"`
	QuantizedAfter   int64   `json:"quantized_bytes_after"`
	BitsPerParameter float64 `json:"bits_per_quantized_parameter"`
	Files            int     `json:"files_copied"`
	Seconds          float64 `json:"seconds"`
}

// WriteText writes the summary for people.
func (s FolderSummary) WriteText(w io.Writer) error {
	dq := "without"
	if s.DoubleQuant {
		dq = "with"
	}
	_, err := fmt.Fprintf(w, `quantized %s → %s (%s, blocks of %d, %s double quantization)
  tensors:     %d quantized, %d kept as they were; %d other files copied
  weights:     %s → %s (%.1f%%)
  quantized:   %d parameters, %s → %s, %.3f bits per parameter
  time:        %.1f s
`, s.Model, s.Out, s.QuantType, s.BlockSize, dq, s.Quantized, s.Kept, s.Files,
		human.Bytes(s.BytesBefore), human.Bytes(s.BytesAfter), 100*float64(s.BytesAfter)/float64(max(s.BytesBefore, 1)),
		s.QuantizedParams, human.Bytes(s.QuantizedBefore), human.Bytes(s.QuantizedAfter), s.BitsPerParameter, s.Seconds)
	return err
}

// Linear weights bitsandbytes quantizes, by family: transformers replaces every nn.Linear
// (and GPT-2's Conv1D) but the LM head; embeddings are not linears.
var (
	llamaLinear = regexp.MustCompile(`(^|\.)layers\.\d+\.(self_attn\.(q|k|v|o|qkv)_proj|mlp\.(gate|up|down|gate_up)_proj)\.weight$`)
	gpt2Linear  = regexp.MustCompile(`(^|\.)h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$`)
)

// FolderOptions say how QuantizeFolder writes.
type FolderOptions struct {
	Options
	// ShardBytes splits the weights into shards with an index above this size; 0 for 4 GiB.
	ShardBytes int64
	// Progress receives a line now and then for models large enough to take a while, and the
	// files left out; nil for none.
	Progress io.Writer
	// Head quantizes lm_head.weight too, and writes a skip list without it (transformers
	// then loads it 4-bit). A tied head (no lm_head.weight) is refused: bitsandbytes stores no
	// 4-bit embedding.
	Head bool
}

// defaultShardBytes is the size above which the output weights are split into shards.
const defaultShardBytes = 4 << 30

// maxCopiedFile bounds the other files copied along (tokenizer files and such).
const maxCopiedFile = 64 << 20

// QuantizeFolder writes a copy of the Hugging Face model folder dir into out with every linear
// weight of the transformer blocks quantized to 4 bits as bitsandbytes does (llama family:
// q/k/v/o_proj, gate/up/down_proj; GPT-2: c_attn, c_proj, c_fc, transposed to [out, in] first
// as transformers does for Conv1D), and everything else (embeddings, LM head, norms, biases)
// as it was. config.json gains a quantization_config; tokenizer and other small files are
// copied. out must not exist or be empty; it appears only when complete.
func QuantizeFolder(dir, out string, o FolderOptions) (FolderSummary, error) {
	opt := o.Options
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	if o.ShardBytes <= 0 {
		o.ShardBytes = defaultShardBytes
	}
	start := time.Now()
	sum := FolderSummary{Model: dir, Out: out, QuantType: string(opt.Type), BlockSize: opt.BlockSize, DoubleQuant: opt.DoubleQuant}
	cfgPath := filepath.Join(dir, "config.json")
	cfgRaw, err := os.ReadFile(cfgPath)
	if err != nil {
		return sum, err
	}
	cfg, err := decodeConfigJSON(cfgRaw)
	if err != nil {
		return sum, fmt.Errorf("%s: %v", cfgPath, err)
	}
	if _, q, err := IsQuantized(cfgRaw); q || err != nil {
		if err != nil {
			return sum, fmt.Errorf("%s: already quantized: %v", cfgPath, err)
		}
		return sum, fmt.Errorf("%s: the model is already quantized (quantization_config is set)", cfgPath)
	}
	mt, _ := cfg["model_type"].(string)
	var linear *regexp.Regexp
	transpose := false
	switch mt {
	case "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "smollm3", "olmo2":
		linear = llamaLinear // phi3's fused qkv_proj and gate_up_proj included
	case "gpt2":
		linear, transpose = gpt2Linear, true
	case "":
		return sum, fmt.Errorf("%s: no model_type", cfgPath)
	default:
		return sum, fmt.Errorf("%s: model_type %q is not supported (gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, smollm3, olmo2)", cfgPath, mt)
	}
	if err := checkOut(out); err != nil {
		return sum, err
	}
	set, err := safetensors.OpenSet(dir)
	if err != nil {
		return sum, err
	}
	defer set.Close()

	var total int64
	for _, name := range set.Names() {
		info, _ := set.Info(name)
		total += info.End - info.Begin
	}
	sum.BytesBefore = total
	prog := newQuantProgress(progress, "quantize", total)
	if _, ok := set.Info("lm_head.weight"); o.Head && !ok {
		return sum, fmt.Errorf("%s: no lm_head.weight: the head is tied to the embedding, which bitsandbytes does not store 4-bit (a run's [quant] head = true quantizes the tied tensor in memory)", dir)
	}
	var tensors []safetensors.Tensor
	for _, name := range set.Names() {
		info, _ := set.Info(name)
		size := info.End - info.Begin
		if !linear.MatchString(name) && !(o.Head && name == "lm_head.weight") {
			b, err := set.Bytes(name) // kept as is: a view of the mapped input, not a copy
			if err != nil {
				return sum, err
			}
			tensors = append(tensors, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: b})
			sum.Kept++
			prog.add(size)
			continue
		}
		ts, err := quantizeTensor(set, name, info, transpose, opt)
		if err != nil {
			return sum, err
		}
		for _, t := range ts {
			sum.QuantizedAfter += int64(len(t.Data))
		}
		tensors = append(tensors, ts...)
		sum.Quantized++
		sum.QuantizedParams += int64(info.NumElements())
		sum.QuantizedBefore += size
		prog.add(size)
	}
	prog.finish()
	if sum.Quantized == 0 {
		return sum, fmt.Errorf("%s: no linear weight to quantize among %d tensors", dir, len(set.Names()))
	}
	for _, t := range tensors {
		sum.BytesAfter += int64(len(t.Data))
	}
	sum.BitsPerParameter = 8 * float64(sum.QuantizedAfter) / float64(sum.QuantizedParams)

	// Everything goes into a temporary folder beside out, moved into place when complete.
	tmp, err := atomicfile.TempDir(out)
	if err != nil {
		return sum, err
	}
	defer os.RemoveAll(tmp) // a no-op once moved
	if err := writeFolderWeights(tmp, tensors, o.ShardBytes); err != nil {
		return sum, err
	}
	qc := NewConfig(opt, computeDType(cfg))
	if o.Head {
		qc.SkipModules = []string{} // complete: lm_head is not skipped
	}
	cfg["quantization_config"] = qc.JSON()
	if err := writeJSON(filepath.Join(tmp, "config.json"), cfg); err != nil {
		return sum, err
	}
	if sum.Files, err = copyModelFiles(dir, tmp, progress, "quantize"); err != nil {
		return sum, err
	}
	if err := atomicfile.ReplaceDir(tmp, out); err != nil {
		return sum, err
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

// quantizeTensor quantizes one linear weight into its bitsandbytes tensors.
func quantizeTensor(set *safetensors.Set, name string, info safetensors.TensorInfo, transpose bool, opt Options) ([]safetensors.Tensor, error) {
	where := set.Dir
	if f, ok := set.File(name); ok {
		where = f.Path
	}
	if len(info.Shape) != 2 {
		return nil, fmt.Errorf("%s: tensor %q: shape %v is not a 2-D linear weight", where, name, info.Shape)
	}
	dtype, ok := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.F16: "float16", safetensors.BF16: "bfloat16"}[info.DType]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q: dtype %s cannot be quantized (F32, F16 or BF16)", where, name, info.DType)
	}
	x, shape, err := set.Float32(name)
	if err != nil {
		return nil, err
	}
	rows, cols := shape[0], shape[1]
	if transpose { // Conv1D stores [in, out]; bitsandbytes quantizes the [out, in] linear weight
		y := make([]float32, len(x))
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				y[j*rows+i] = x[i*cols+j]
			}
		}
		x, rows, cols = y, cols, rows
	}
	w, err := Quantize(x, rows, cols, dtype, opt)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %v", where, name, err)
	}
	return w.Tensors(strings.TrimSuffix(name, ".weight")), nil
}

// computeDType is the dtype transformers would compute in: the model's own (torch_dtype, or
// dtype in newer configs), float32 when unset.
func computeDType(cfg map[string]any) string {
	for _, k := range []string{"torch_dtype", "dtype"} {
		if s, ok := cfg[k].(string); ok && s != "" {
			return strings.TrimPrefix(s, "torch.")
		}
	}
	return "float32"
}

// decodeConfigJSON reads config.json keeping numbers as written.
func decodeConfigJSON(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// checkOut refuses an output that exists and is not an empty folder.
func checkOut(out string) error {
	st, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("output %s exists and is not a folder", out)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("output %s exists and is not empty", out)
	}
	return nil
}

// writeFolderWeights writes model.safetensors, or shards and their index above shardBytes.
func writeFolderWeights(dir string, tensors []safetensors.Tensor, shardBytes int64) error {
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
	var shards [][]safetensors.Tensor
	var size, total int64
	for _, t := range tensors {
		n := int64(len(t.Data))
		if len(shards) == 0 || (size+n > shardBytes && size > 0) {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], t)
		size += n
		total += n
	}
	meta := map[string]string{"format": "pt"}
	if len(shards) == 1 {
		return safetensors.Write(filepath.Join(dir, safetensors.SingleFile), shards[0], meta)
	}
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := safetensors.Write(filepath.Join(dir, name), sh, meta); err != nil {
			return err
		}
		for _, t := range sh {
			weightMap[t.Name] = name
		}
	}
	return writeJSON(filepath.Join(dir, safetensors.IndexFile),
		map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap})
}

// writeJSON writes v as indented JSON, atomically.
func writeJSON(path string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b.Bytes(), 0o644)
}

// isWeightFile reports files holding weights in any format: they are not copied.
func isWeightFile(name string) bool {
	if name == safetensors.IndexFile || name == "pytorch_model.bin.index.json" || name == "config.json" {
		return true
	}
	for _, ext := range []string{".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// copyModelFiles copies the folder's other regular files (tokenizer, generation config, chat
// template…) up to maxCopiedFile each, saying on w which it leaves out (the line starts
// with verb, the command's name).
func copyModelFiles(src, dst string, w io.Writer, verb string) (int, error) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if !e.Type().IsRegular() || isWeightFile(e.Name()) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return n, err
		}
		if info.Size() > maxCopiedFile {
			fmt.Fprintf(w, "%s: not copying %s (%s)\n", verb, e.Name(), human.Bytes(info.Size()))
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return n, err
		}
		if err := atomicfile.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// quantProgress prints how far a folder's weights are, at most once a second, for models large
// enough to take a while; lines start with verb, the command's name.
type quantProgress struct {
	w           io.Writer
	verb        string
	total, read int64
	last        time.Time
	on          bool
}

func newQuantProgress(w io.Writer, verb string, total int64) *quantProgress {
	return &quantProgress{w: w, verb: verb, total: total, last: time.Now(), on: total >= 256<<20}
}

func (p *quantProgress) add(n int64) {
	p.read += n
	if p.on && time.Since(p.last) >= time.Second {
		p.last = time.Now()
		fmt.Fprintf(p.w, "%s: %s of %s (%.0f%%)\n", p.verb, human.Bytes(p.read), human.Bytes(p.total), 100*float64(p.read)/float64(p.total))
	}
}

func (p *quantProgress) finish() {
	if p.on {
		fmt.Fprintf(p.w, "%s: %s of weights read, writing\n", p.verb, human.Bytes(p.total))
	}
}
