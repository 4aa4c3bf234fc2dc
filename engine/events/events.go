// Package events defines the records a run emits (DESIGN §9). The engine writes them, the
// sinks (events.jsonl, TensorBoard) and the front ends (TUI, batch, replay) read them.
package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"time"

	"rlhfstation/internal/atomicfile"
)

// Type names the kind of an event, as written in the "type" field.
type Type string

const (
	RunStart   Type = "run_start"
	Step       Type = "step"
	Samples    Type = "samples"
	Anomaly    Type = "anomaly"
	Checkpoint Type = "checkpoint"
	Log        Type = "log"
	RunEnd     Type = "run_end"
)

// Severity of an anomaly.
const (
	Info     = "info"
	Warning  = "warning"
	Critical = "critical"
)

// Event is one record. Only the fields of its Type are set; the rest are omitted from JSON.
type Event struct {
	Type Type      `json:"type"`
	Time time.Time `json:"time"`
	Step int       `json:"step"`

	// run_start
	Run        string         `json:"run,omitempty"`    // run folder name
	Model      string         `json:"model,omitempty"`  // model folder or "builtin"
	Device     string         `json:"device,omitempty"` // "cpu", "cuda:0 (NVIDIA H100)"…
	Preset     string         `json:"preset,omitempty"` // reward preset name
	TotalSteps int            `json:"total_steps,omitempty"`
	Params     *Params        `json:"params,omitempty"`
	Config     map[string]any `json:"config,omitempty"` // the resolved run configuration
	// Source names the tool that wrote a run read from its own files ("TRL / Hugging Face
	// Trainer", "verl", "OpenRLHF"); empty for rlhfstation's runs.
	Source string `json:"source,omitempty"`

	// step
	Metrics Metrics `json:"metrics,omitempty"`

	// samples
	Samples []Sample `json:"samples,omitempty"`

	// anomaly
	Rule     string  `json:"rule,omitempty"`
	Metric   string  `json:"metric,omitempty"`
	Value    float64 `json:"value,omitempty"`
	Severity string  `json:"severity,omitempty"`

	// checkpoint
	Path   string  `json:"path,omitempty"`
	Health *Health `json:"health,omitempty"`

	// log (and the message of anomaly)
	Level   string `json:"level,omitempty"`
	Message string `json:"message,omitempty"`
	// Control marks a log event that acknowledges a request of the control channel
	// (engine/control): "pause", "resume", "save" or "stop", written when it took effect.
	Control string `json:"control,omitempty"`

	// run_end
	Status string `json:"status,omitempty"` // "completed", "stopped", "interrupted", "failed"
	Reason string `json:"reason,omitempty"`
}

// Params counts the model's parameters at run start.
type Params struct {
	Total     int64 `json:"total"`
	Trainable int64 `json:"trainable"`
	// Resident is the bytes the base weights occupy (smaller when quantized).
	ResidentBytes int64 `json:"resident_bytes,omitempty"`
}

// Sample is one completion with its rewards.
type Sample struct {
	Prompt     string  `json:"prompt"`
	Completion string  `json:"completion"`
	Answer     string  `json:"answer,omitempty"` // ground truth, where the data has one
	Reward     float64 `json:"reward"`
	Rewards    Metrics `json:"rewards,omitempty"` // per reward function
	Advantage  float64 `json:"advantage"`
	// Turns are the messages of a multi-turn episode, in order (none for single-turn runs).
	Turns []Turn `json:"turns,omitempty"`
	// Failed says why the environment failed the episode (scored as not applicable).
	Failed string `json:"failed,omitempty"`
}

// Turn is one message of a multi-turn episode: the model's turns (in the loss) and the
// environment's or the prompt's (Masked: out of the loss).
type Turn struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	Masked  bool   `json:"masked,omitempty"`
}

// Health summarises a checkpoint's analysis.
type Health struct {
	Score  float64  `json:"score"` // 0…1
	Issues []string `json:"issues,omitempty"`
}

// Metrics maps metric names (DESIGN §5) to values. Non-finite values are kept: they are
// written as the strings "NaN", "+Inf" and "-Inf", which JSON numbers cannot hold.
type Metrics map[string]float64

func (m Metrics) MarshalJSON() ([]byte, error) {
	raw := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		switch {
		case math.IsNaN(v):
			raw[k] = json.RawMessage(`"NaN"`)
		case math.IsInf(v, 1):
			raw[k] = json.RawMessage(`"+Inf"`)
		case math.IsInf(v, -1):
			raw[k] = json.RawMessage(`"-Inf"`)
		default:
			raw[k] = json.RawMessage(strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return json.Marshal(raw)
}

func (m *Metrics) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Metrics, len(raw))
	for k, r := range raw {
		var f float64
		if err := json.Unmarshal(r, &f); err == nil {
			out[k] = f
			continue
		}
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return fmt.Errorf("metric %q: %s is neither a number nor NaN/Inf", k, r)
		}
		switch s {
		case "NaN":
			out[k] = math.NaN()
		case "+Inf", "Inf":
			out[k] = math.Inf(1)
		case "-Inf":
			out[k] = math.Inf(-1)
		default:
			return fmt.Errorf("metric %q: %q is neither a number nor NaN/Inf", k, s)
		}
	}
	*m = out
	return nil
}

// Writer appends events to an events.jsonl stream, one JSON object a line.
type Writer struct {
	w   *bufio.Writer
	f   *os.File // synced on Flush when set
	enc *json.Encoder
}

// NewWriter writes to w. If w is an *os.File, Flush also syncs it.
func NewWriter(w io.Writer) *Writer {
	bw := bufio.NewWriter(w)
	ew := &Writer{w: bw, enc: json.NewEncoder(bw)}
	ew.enc.SetEscapeHTML(false)
	if f, ok := w.(*os.File); ok {
		ew.f = f
	}
	return ew
}

// Write appends one event. Call Flush to make it visible to readers.
func (w *Writer) Write(e Event) error { return w.enc.Encode(e) }

// Flush pushes buffered events to the file.
func (w *Writer) Flush() error {
	if err := w.w.Flush(); err != nil {
		return err
	}
	if w.f != nil {
		return w.f.Sync()
	}
	return nil
}

// Reader reads events back from an events.jsonl stream. A last line without its newline is
// treated as not yet written (a run still in progress), not as an error.
type Reader struct {
	r    *bufio.Reader
	line int
	name string
	part []byte
}

// NewReader reads from r; name is used in errors (usually the file's path).
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 1<<16), name: name}
}

// Next returns the next complete event, or io.EOF when none is complete yet. After io.EOF a
// later call may return more events if the file has grown (following a live run).
func (r *Reader) Next() (Event, error) {
	for {
		chunk, err := r.r.ReadBytes('\n')
		r.part = append(r.part, chunk...)
		if err != nil {
			if err == io.EOF {
				return Event{}, io.EOF
			}
			return Event{}, fmt.Errorf("%s: %w", r.name, err)
		}
		line := r.part
		r.part = nil
		r.line++
		if len(line) <= 1 {
			continue
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return Event{}, fmt.Errorf("%s:%d: %v", r.name, r.line, err)
		}
		return e, nil
	}
}

// ReadFile reads every complete event of an events.jsonl file.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := NewReader(f, path)
	var out []Event
	for {
		e, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
}

// KeepThrough rewrites the events file at path with only its complete lines of steps up to
// step: a run resumed from step's checkpoint logs the later steps again, and a torn line (a
// process killed mid-write) would otherwise fuse with the next event. Lines that do not parse
// are dropped too. A missing file is left missing. The rewrite is atomic.
func KeepThrough(path string, step int) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var kept []byte
	dropped := false
	for rest := data; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 { // torn
			dropped = true
			break
		}
		line := rest[:i+1]
		rest = rest[i+1:]
		var head struct {
			Step int `json:"step"`
		}
		if json.Unmarshal(line, &head) != nil || head.Step > step {
			dropped = true
			continue
		}
		kept = append(kept, line...)
	}
	if !dropped {
		return nil
	}
	return atomicfile.WriteFile(path, kept, 0o644)
}
