// Package runstest writes runs as other tools lay them out, for tests: a TRL / Hugging Face
// Trainer output folder (trainer_state.json with float epochs and Python's bare NaN,
// TensorBoard event files, checkpoint-N/ folders with a PEFT adapter and the Trainer's pickles,
// completions tables), verl's file-logger JSONL and OpenRLHF's TensorBoard folder. Everything
// is written from the formats' documentation by this package's own code (its protobuf encoder
// shares nothing with the reader it tests), with anomalies planted where a Plan says.
package runstest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/parquet-go/parquet-go"

	"rlhfstation/safetensors"
)

// Plan is a synthetic GRPO run: a reward that rises with noise, KL that grows slowly, entropy
// that falls slowly, with the anomalies it asks for.
type Plan struct {
	Steps int
	Seed  uint64
	// KLSpike: kl is 0.8 at steps KLSpike and KLSpike+1 (0: none). The kl_high rule (above
	// 0.30 for 2 steps) fires at KLSpike+1.
	KLSpike int
	// Plateau: the reward is exactly constant from this step on (0: none). The reward_stall
	// rule (a line through the last 30 rewards) fires once the window is all plateau:
	// at Plateau+29.
	Plateau int
	// NaNGrad: grad_norm is NaN at this step (0: none); the non_finite rule fires there.
	NaNGrad int
}

// Metrics are the plan's metrics at step (1-based), under TRL's (DESIGN §5's) names.
func (p Plan) Metrics(step int) map[string]float64 {
	r := rand.New(rand.NewPCG(p.Seed, uint64(step)))
	x := float64(step)
	reward := 0.2 + 0.006*x + 0.02*r.NormFloat64()
	if p.Plateau > 0 && step >= p.Plateau {
		reward = 0.2 + 0.006*float64(p.Plateau)
	}
	kl := 0.001*x + 0.002*r.Float64()
	if p.KLSpike > 0 && (step == p.KLSpike || step == p.KLSpike+1) {
		kl = 0.8
	}
	grad := 0.8 + 0.1*r.NormFloat64()
	if step == p.NaNGrad {
		grad = math.NaN()
	}
	acc := 0.5 + 0.004*x + 0.02*r.NormFloat64()
	return map[string]float64{
		"loss":                         0.01 * r.NormFloat64(),
		"reward":                       reward,
		"reward_std":                   0.3 + 0.02*r.NormFloat64(),
		"rewards/accuracy_reward/mean": acc,
		"rewards/accuracy_reward/std":  0.4 + 0.02*r.NormFloat64(),
		"frac_reward_zero_std":         0.2 + 0.05*r.Float64(),
		"kl":                           kl,
		"entropy":                      1.2 - 0.004*x + 0.02*r.NormFloat64(),
		"grad_norm":                    grad,
		"learning_rate":                1e-5 * (1 - x/float64(p.Steps+1)),
		"completions/mean_length":      60 + 0.2*x + 2*r.NormFloat64(),
		"clip_ratio/region_mean":       0,
		"num_tokens":                   1000 * x,
		"epoch":                        x / float64(p.Steps),
	}
}

// Verl maps the plan's names to verl's (verl logs no reward std or per-function means).
var Verl = map[string]string{
	"reward": "critic/score/mean", "kl": "actor/kl_loss", "entropy": "actor/entropy", "loss": "actor/pg_loss",
	"grad_norm": "actor/grad_norm", "learning_rate": "actor/lr", "completions/mean_length": "response_length/mean",
	"clip_ratio/region_mean": "actor/pg_clipfrac", "epoch": "training/epoch",
}

// OpenRLHF maps the plan's names to OpenRLHF's status keys (written under "train/").
var OpenRLHF = map[string]string{
	"reward": "reward", "kl": "kl", "loss": "policy_loss", "grad_norm": "actor_grad_norm",
	"learning_rate": "actor_lr", "completions/mean_length": "response_length", "reward_std": "group_reward_std",
	"entropy": "entropy_loss", "clip_ratio/region_mean": "ppo_clip_ratio",
}

// Rename maps a step's metrics through names (metrics it lacks are dropped).
func Rename(m map[string]float64, names map[string]string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if n, ok := names[k]; ok {
			out[n] = v
		}
	}
	return out
}

// WriteVerlLog writes verl's file logger: {"step": N, "data": {...}} a line, as orjson writes
// it (non-finite floats as null). The last line may be cut (torn) to test a live file.
func WriteVerlLog(path string, p Plan, torn bool) error {
	var b strings.Builder
	for s := 1; s <= p.Steps; s++ {
		data := Rename(p.Metrics(s), Verl)
		data["critic/score/max"] = 1
		data["actor/ppo_kl"] = 1e-4
		data["timing_s/step"] = 3.5
		b.WriteString(VerlLine(s, data))
	}
	out := b.String()
	if torn {
		out = out[:len(out)-7]
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// VerlLine is one line of verl's file logger.
func VerlLine(step int, data map[string]float64) string {
	keys := sortedKeys(data)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%q:%s", k, pyNumber(data[k], "null"))
	}
	return fmt.Sprintf(`{"step":%d,"data":{%s}}`+"\n", step, strings.Join(parts, ","))
}

// pyNumber writes a float as Python does; nonFinite is how NaN is spelled ("NaN" for json,
// "null" for orjson).
func pyNumber(v float64, nan string) string {
	switch {
	case math.IsNaN(v):
		return nan
	case math.IsInf(v, 1):
		if nan == "null" {
			return "null"
		}
		return "Infinity"
	case math.IsInf(v, -1):
		if nan == "null" {
			return "null"
		}
		return "-Infinity"
	}
	s := fmt.Sprintf("%v", v)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// TrainerState writes a Hugging Face trainer_state.json holding the log history up to step
// (one entry a step, the end-of-training summary when step is the last), as transformers
// writes it: sorted keys, float epochs, bare NaN.
func TrainerState(path string, p Plan, upTo int) error {
	var hist []string
	for s := 1; s <= upTo; s++ {
		m := p.Metrics(s)
		m["step"] = float64(s)
		keys := sortedKeys(m)
		parts := make([]string, len(keys))
		for i, k := range keys {
			v := pyNumber(m[k], "NaN")
			if k == "step" || k == "num_tokens" {
				v = fmt.Sprint(int64(m[k]))
			}
			parts[i] = fmt.Sprintf("      %q: %s", k, v)
		}
		hist = append(hist, "    {\n"+strings.Join(parts, ",\n")+"\n    }")
	}
	if upTo == p.Steps {
		hist = append(hist, fmt.Sprintf(`    {"epoch": 1.0, "step": %d, "total_flos": 0.0, "train_loss": 0.0021, "train_runtime": 812.5, "train_samples_per_second": 1.2, "train_steps_per_second": 0.1}`, upTo))
	}
	doc := fmt.Sprintf(`{
  "best_global_step": null,
  "best_metric": null,
  "best_model_checkpoint": null,
  "epoch": %s,
  "eval_steps": 500,
  "global_step": %d,
  "is_hyper_param_search": false,
  "is_local_process_zero": true,
  "is_world_process_zero": true,
  "log_history": [
%s
  ],
  "logging_steps": 1,
  "max_steps": %d,
  "num_input_tokens_seen": 0,
  "num_train_epochs": 1,
  "save_steps": 10,
  "stateful_callbacks": {
    "TrainerControl": {"args": {"should_epoch_stop": false, "should_evaluate": false, "should_log": false, "should_save": true, "should_training_stop": false}, "attributes": {}}
  },
  "total_flos": 0.0,
  "train_batch_size": 8,
  "trial_name": null,
  "trial_params": null
}
`, pyNumber(float64(upTo)/float64(p.Steps), "NaN"), upTo, strings.Join(hist, ",\n"), p.Steps)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// AdapterOptions shape a PEFT adapter folder.
type AdapterOptions struct {
	Layers    int // decoder layers, each with q_proj and v_proj (2 when 0)
	Rank      int // 8 when 0
	Dim       int // hidden size (32 when 0)
	Seed      uint64
	Untrained bool // B all zero, as PEFT initialises it
}

// Adapter writes adapter_config.json and adapter_model.safetensors as PEFT saves a LoRA
// adapter of a llama-style model (bf16 weights, every PEFT config key).
func Adapter(dir string, o AdapterOptions) error {
	if o.Layers == 0 {
		o.Layers = 2
	}
	if o.Rank == 0 {
		o.Rank = 8
	}
	if o.Dim == 0 {
		o.Dim = 32
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`{
  "alpha_pattern": {},
  "auto_mapping": null,
  "base_model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
  "bias": "none",
  "corda_config": null,
  "eva_config": null,
  "exclude_modules": null,
  "fan_in_fan_out": false,
  "inference_mode": true,
  "init_lora_weights": true,
  "layer_replication": null,
  "layers_pattern": null,
  "layers_to_transform": null,
  "loftq_config": {},
  "lora_alpha": %d,
  "lora_bias": false,
  "lora_dropout": 0.05,
  "megatron_config": null,
  "megatron_core": "megatron.core",
  "modules_to_save": null,
  "peft_type": "LORA",
  "r": %d,
  "rank_pattern": {},
  "revision": null,
  "target_modules": [
    "v_proj",
    "q_proj"
  ],
  "task_type": "CAUSAL_LM",
  "trainable_token_indices": null,
  "use_dora": false,
  "use_rslora": false
}`, 2*o.Rank, o.Rank)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(o.Seed, 7))
	var ts []safetensors.Tensor
	bound := 1 / math.Sqrt(float64(o.Dim)) // kaiming_uniform(a=√5) on [r, in]
	for l := 0; l < o.Layers; l++ {
		for _, m := range []string{"q_proj", "v_proj"} {
			name := fmt.Sprintf("base_model.model.model.layers.%d.self_attn.%s", l, m)
			a := make([]float32, o.Rank*o.Dim)
			for i := range a {
				a[i] = float32((2*r.Float64() - 1) * bound)
			}
			b := make([]float32, o.Dim*o.Rank)
			if !o.Untrained {
				for i := range b {
					b[i] = float32(0.01 * r.NormFloat64())
				}
			}
			ts = append(ts, safetensors.BF16Tensor(name+".lora_A.weight", []int{o.Rank, o.Dim}, a),
				safetensors.BF16Tensor(name+".lora_B.weight", []int{o.Dim, o.Rank}, b))
		}
	}
	return safetensors.Write(filepath.Join(dir, "adapter_model.safetensors"), ts, map[string]string{"format": "pt"})
}

// TrainerPickles writes stand-ins of the files the Trainer saves beside the adapter
// (PyTorch zip archives and pickles); nothing may read them.
func TrainerPickles(dir string) error {
	for _, name := range []string{"optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"} {
		// A zip local-file header, then bytes no reader should try to make sense of.
		b := append([]byte("PK\x03\x04"), []byte("not for reading: "+name)...)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte("---\nlibrary_name: peft\n---\n"), 0o644)
}

// Checkpoint writes a TRL checkpoint-N folder: adapter, trainer_state.json up to step, pickles.
func Checkpoint(dir string, p Plan, step int) error {
	ck := filepath.Join(dir, fmt.Sprintf("checkpoint-%d", step))
	if err := Adapter(ck, AdapterOptions{Seed: uint64(step)}); err != nil {
		return err
	}
	if err := TrainerState(filepath.Join(ck, "trainer_state.json"), p, step); err != nil {
		return err
	}
	return TrainerPickles(ck)
}

// WandbTable writes TRL's completions table as Weights & Biases saves it.
func WandbTable(path string, step int, rows [][3]any) error {
	data := make([][]any, len(rows))
	for i, r := range rows {
		data[i] = []any{step, r[0], r[1], r[2], 0.5 - float64(i)*0.25}
	}
	b, err := json.Marshal(map[string]any{"_type": "table", "columns": []string{"step", "prompt", "completion", "accuracy_reward", "advantage"},
		"data": data, "ncols": 5, "nrows": len(rows)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// RolloutDump writes verl's trainer.rollout_data_dir file for a step.
func RolloutDump(dir string, step int, rows [][3]any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for _, r := range rows {
		line, _ := json.Marshal(map[string]any{"input": r[0], "output": r[1], "gts": "42", "score": r[2], "step": step, "acc": r[2]})
		b.Write(line)
		b.WriteByte('\n')
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.jsonl", step)), []byte(b.String()), 0o644)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TensorBoard event files, encoded here from event.proto and summary.proto.

// Encoding is how a scalar is stored in an event.
type Encoding int

const (
	SimpleValue   Encoding = iota // Summary.Value.simple_value (PyTorch's add_scalar default)
	TensorFloat                   // a DT_FLOAT tensor with float_val (add_scalar(new_style=True))
	TensorContent                 // a DT_FLOAT tensor with tensor_content (TensorFlow 2)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func masked(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

func varint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func tag(b []byte, field, wire int) []byte { return varint(b, uint64(field<<3|wire)) }

func lenField(b []byte, field int, v []byte) []byte {
	return append(varint(tag(b, field, 2), uint64(len(v))), v...)
}

// Record frames one event as a TFRecord.
func Record(event []byte) []byte {
	var out []byte
	out = binary.LittleEndian.AppendUint64(out, uint64(len(event)))
	out = binary.LittleEndian.AppendUint32(out, masked(out[:8]))
	out = append(out, event...)
	return binary.LittleEndian.AppendUint32(out, masked(event))
}

func eventHead(wall float64, step int64) []byte {
	b := binary.LittleEndian.AppendUint64(tag(nil, 1, 1), math.Float64bits(wall))
	return varint(tag(b, 2, 0), uint64(step))
}

// FileVersion is the first event of every file.
func FileVersion(wall float64) []byte {
	return lenField(eventHead(wall, 0), 3, []byte("brain.Event:2"))
}

// ScalarEvent is one add_scalar call.
func ScalarEvent(wall float64, step int64, name string, v float64, enc Encoding) []byte {
	val := lenField(nil, 1, []byte(name))
	switch enc {
	case SimpleValue:
		val = binary.LittleEndian.AppendUint32(tag(val, 2, 5), math.Float32bits(float32(v)))
	default:
		var t []byte
		t = varint(tag(t, 1, 0), 1) // dtype DT_FLOAT
		t = lenField(t, 2, nil)     // tensor_shape: a scalar
		if enc == TensorFloat {
			t = lenField(t, 5, binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(v)))) // packed float_val
		} else {
			t = lenField(t, 4, binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(v)))) // tensor_content
		}
		val = lenField(val, 8, t)
		meta := lenField(nil, 1, lenField(nil, 1, []byte("scalars"))) // plugin_data.plugin_name
		val = lenField(val, 9, meta)
	}
	return lenField(eventHead(wall, step), 5, lenField(nil, 1, val))
}

// TextEvent is one add_text call (a DT_STRING tensor of the text plugin).
func TextEvent(wall float64, step int64, name, text string) []byte {
	var t []byte
	t = varint(tag(t, 1, 0), 7) // DT_STRING
	t = lenField(t, 2, lenField(nil, 2, varint(tag(nil, 1, 0), 1)))
	t = lenField(t, 8, []byte(text))
	val := lenField(nil, 1, []byte(name))
	val = lenField(val, 8, t)
	val = lenField(val, 9, lenField(nil, 1, lenField(nil, 1, []byte("text"))))
	return lenField(eventHead(wall, step), 5, lenField(nil, 1, val))
}

// EventFile is an event file being written, as a SummaryWriter does: one record per scalar.
type EventFile struct {
	Path string
	f    *os.File
	Enc  Encoding
	Wall float64
}

// CreateEventFile starts events.out.tfevents.<stamp>.<host> in dir.
func CreateEventFile(dir string, stamp int64, enc Encoding) (*EventFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%d.testhost.4242.0", stamp))
	f, err := os.Create(p)
	if err != nil {
		return nil, err
	}
	e := &EventFile{Path: p, f: f, Enc: enc, Wall: float64(stamp)}
	_, err = f.Write(Record(FileVersion(e.Wall)))
	return e, err
}

// Step appends one step's scalars (sorted by name, one record each) under prefix.
func (e *EventFile) Step(step int, m map[string]float64, prefix string) error {
	e.Wall += 10
	var b []byte
	for _, k := range sortedKeys(m) {
		b = append(b, Record(ScalarEvent(e.Wall, int64(step), prefix+k, m[k], e.Enc))...)
	}
	_, err := e.f.Write(b)
	return err
}

// Text appends one text summary.
func (e *EventFile) Text(step int, name, text string) error {
	_, err := e.f.Write(Record(TextEvent(e.Wall, int64(step), name, text)))
	return err
}

// WriteRaw appends bytes as they are (a torn record, garbage).
func (e *EventFile) WriteRaw(b []byte) error {
	_, err := e.f.Write(b)
	return err
}

// Close closes the file.
func (e *EventFile) Close() error { return e.f.Close() }

// TRLOptions choose what a TRL output folder holds.
type TRLOptions struct {
	TensorBoard bool     // runs/<stamp>_host/events.out.tfevents.* with "train/<key>" tags
	Encoding    Encoding // of the TensorBoard scalars
	Checkpoints []int    // steps with a checkpoint-N folder
	RootState   bool     // trainer_state.json in the folder itself (trainer.save_state())
	Completions bool     // wandb completions tables every 10 steps
}

// WriteTRL writes a TRL GRPOTrainer output folder for the plan.
func WriteTRL(dir string, p Plan, o TRLOptions) error {
	if o.TensorBoard {
		ef, err := CreateEventFile(filepath.Join(dir, "runs", "Jan01_00-00-00_testhost"), 1700000000, o.Encoding)
		if err != nil {
			return err
		}
		for s := 1; s <= p.Steps; s++ {
			if err := ef.Step(s, p.Metrics(s), "train/"); err != nil {
				return err
			}
		}
		if err := ef.Step(p.Steps, map[string]float64{"train_runtime": 812.5, "train_loss": 0.0021, "total_flos": 0}, "train/"); err != nil {
			return err
		}
		if err := ef.Close(); err != nil {
			return err
		}
	}
	for _, s := range o.Checkpoints {
		if err := Checkpoint(dir, p, s); err != nil {
			return err
		}
	}
	if o.RootState {
		if err := TrainerState(filepath.Join(dir, "trainer_state.json"), p, p.Steps); err != nil {
			return err
		}
	}
	if o.Completions {
		for s := 10; s <= p.Steps; s += 10 {
			rows := [][3]any{{"What is 2+3?", fmt.Sprintf("2+3 = 5 (step %d)", s), 1.0}, {"What is 4*4?", "It is 17.", 0.0}}
			if err := WandbTable(filepath.Join(dir, "wandb", "run-20250101_000000-abc", "files", "media", "table",
				fmt.Sprintf("completions_%d_%016x.table.json", s, s)), s, rows); err != nil {
				return err
			}
		}
	}
	return nil
}

// completionRow is a row of TRL's completions table as pandas writes it to parquet.
type completionRow struct {
	Step           int64   `parquet:"step"`
	Prompt         string  `parquet:"prompt"`
	Completion     string  `parquet:"completion"`
	AccuracyReward float64 `parquet:"accuracy_reward"`
	FormatReward   float64 `parquet:"format_reward"`
	Advantage      float64 `parquet:"advantage"`
}

// ParquetCompletions writes TRL's completions/completions_<step>.parquet (log_completions).
func ParquetCompletions(dir string, step int, rows [][3]any) error {
	if err := os.MkdirAll(filepath.Join(dir, "completions"), 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "completions", fmt.Sprintf("completions_%05d.parquet", step)))
	if err != nil {
		return err
	}
	w := parquet.NewGenericWriter[completionRow](f)
	for i, r := range rows {
		acc, _ := r[2].(float64)
		if _, err := w.Write([]completionRow{{Step: int64(step), Prompt: r[0].(string), Completion: r[1].(string),
			AccuracyReward: acc, FormatReward: 0.5, Advantage: 0.5 - 0.25*float64(i)}}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
