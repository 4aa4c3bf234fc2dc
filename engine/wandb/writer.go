package wandb

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"rlhfstation/internal/atomicfile"
)

// Run describes the run an offline folder records.
type Run struct {
	ID      string // 8 characters of [a-z0-9]; "" = random
	Project string // W&B project ("rlhfstation" when "")
	Name    string // display name (the run folder's name)
	Start   time.Time
	// Config is the run's configuration by top-level key (nested tables stay maps): written as
	// the config record and files/config.yaml.
	Config map[string]any
	Args   []string // the command line, for wandb-metadata.json
}

// Writer writes a W&B offline run folder, wandb/offline-run-<yyyymmdd_hhmmss>-<id>/ under the
// run folder: run-<id>.wandb (run, config, a history record per step, then summary and exit),
// files/config.yaml and files/wandb-metadata.json, as the W&B client lays them out so that
// `wandb sync` uploads it. No network is used. Safe for concurrent use.
type Writer struct {
	mu    sync.Mutex
	dir   string
	path  string
	f     *os.File
	lw    *LogWriter
	num   int64
	start time.Time
	last  map[string]float64 // the summary: each metric's last value
	step  int64
	err   error
}

// Create starts the offline run under runDir.
func Create(runDir string, run Run) (*Writer, error) {
	if run.ID == "" {
		run.ID = newID()
	}
	if run.Project == "" {
		run.Project = "rlhfstation"
	}
	if run.Start.IsZero() {
		run.Start = time.Now()
	}
	root := filepath.Join(runDir, "wandb")
	dir := filepath.Join(root, fmt.Sprintf("offline-run-%s-%s", run.Start.UTC().Format("20060102_150405"), run.ID))
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o755); err != nil {
		return nil, fmt.Errorf("wandb: %w", err)
	}
	w := &Writer{dir: dir, path: filepath.Join(dir, "run-"+run.ID+".wandb"), start: run.Start, last: map[string]float64{}, step: -1}
	if err := w.writeFiles(run); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wandb: %w", err)
	}
	w.f = f
	if w.lw, err = NewLogWriter(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("wandb: %s: %w", w.path, err)
	}
	host, _ := os.Hostname()
	items := configItems(run.Config)
	w.record(Record{Kind: KindRun, RunID: run.ID, Project: run.Project, DisplayName: run.Name, Host: host,
		StartTime: run.Start, Items: items})
	w.record(Record{Kind: KindConfig, Items: items})
	// latest-run points at the newest run, as the W&B client leaves it (best effort).
	latest := filepath.Join(root, "latest-run")
	os.Remove(latest)
	os.Symlink(filepath.Base(dir), latest)
	return w, w.Flush()
}

// Dir is the offline run's folder; Path its .wandb file.
func (w *Writer) Dir() string  { return w.dir }
func (w *Writer) Path() string { return w.path }

// Log writes one step's metrics as a history record (with W&B's _step, _runtime and
// _timestamp).
func (w *Writer) Log(step int64, t time.Time, metrics map[string]float64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	items := make([]Item, 0, len(keys)+3)
	for _, k := range keys {
		items = append(items, Item{Key: k, ValueJSON: JSONNumber(metrics[k])})
		w.last[k] = metrics[k]
	}
	items = append(items, w.stamp(step, t)...)
	w.step = step
	w.record(Record{Kind: KindHistory, Step: step, Items: items})
	return w.err
}

// stamp are W&B's own history keys.
func (w *Writer) stamp(step int64, t time.Time) []Item {
	w.last["_runtime"] = t.Sub(w.start).Seconds()
	w.last["_timestamp"] = float64(t.UnixNano()) / 1e9
	w.last["_step"] = float64(step)
	return []Item{{"_runtime", JSONNumber(w.last["_runtime"])}, {"_step", fmt.Sprint(step)},
		{"_timestamp", JSONNumber(w.last["_timestamp"])}}
}

// Flush pushes what is buffered to the file.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil && w.lw != nil {
		if err := w.lw.Flush(); err != nil {
			w.err = fmt.Errorf("wandb: %s: %w", w.path, err)
		}
	}
	return w.err
}

// Finish writes the summary (each metric's last value) and the exit record, then closes the
// file. exitCode is the process's: 0 for a finished run.
func (w *Writer) Finish(exitCode int, t time.Time) error {
	w.mu.Lock()
	if w.f == nil {
		w.mu.Unlock()
		return w.err
	}
	keys := make([]string, 0, len(w.last))
	for k := range w.last {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var items []Item
	for _, k := range keys {
		v := JSONNumber(w.last[k])
		if k == "_step" {
			v = fmt.Sprint(int64(w.last[k]))
		}
		items = append(items, Item{Key: k, ValueJSON: v})
	}
	w.record(Record{Kind: KindSummary, Items: items})
	w.record(Record{Kind: KindExit, ExitCode: int32(exitCode), Runtime: int32(t.Sub(w.start).Seconds())})
	w.mu.Unlock()
	return w.Close()
}

// Close flushes and closes the file without a summary or exit record (a run cut short reads
// as still running, as the W&B client leaves it).
func (w *Writer) Close() error {
	err := w.Flush()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		if cerr := w.f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("wandb: %s: %w", w.path, cerr)
		}
		w.f = nil
	}
	return err
}

// record frames r into the buffer; the caller holds mu (or owns w).
func (w *Writer) record(r Record) {
	if w.err != nil {
		return
	}
	if w.f == nil {
		w.err = fmt.Errorf("wandb: %s: writer closed", w.path)
		return
	}
	w.num++
	r.Num = w.num
	if err := w.lw.Write(r); err != nil {
		w.err = fmt.Errorf("wandb: %s: %w", w.path, err)
	}
}

// writeFiles writes files/config.yaml and files/wandb-metadata.json.
func (w *Writer) writeFiles(run Run) error {
	var y strings.Builder
	fmt.Fprintf(&y, "_wandb:\n  value:\n    cli_version: null\n    framework: rlhfstation\n    start_time: %d\n", run.Start.Unix())
	for _, it := range configItems(run.Config) {
		fmt.Fprintf(&y, "%s:\n  value: %s\n", yamlKey(it.Key), it.ValueJSON)
	}
	if err := atomicfile.WriteFile(filepath.Join(w.dir, "files", "config.yaml"), []byte(y.String()), 0o644); err != nil {
		return fmt.Errorf("wandb: %w", err)
	}
	host, _ := os.Hostname()
	exe, _ := os.Executable()
	meta, _ := json.MarshalIndent(map[string]any{
		"os": runtime.GOOS + "-" + runtime.GOARCH, "program": "rlhfstation", "executable": exe,
		"host": host, "startedAt": run.Start.UTC().Format(time.RFC3339Nano), "args": run.Args,
		"cpu_count": runtime.NumCPU(),
	}, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(w.dir, "files", "wandb-metadata.json"), append(meta, '\n'), 0o644); err != nil {
		return fmt.Errorf("wandb: %w", err)
	}
	return nil
}

// configItems are the config's top-level keys, sorted, with their values as JSON (JSON is
// also YAML's flow style, so config.yaml reuses it).
func configItems(cfg map[string]any) []Item {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	items := make([]Item, 0, len(keys))
	for _, k := range keys {
		b, err := json.Marshal(cfg[k])
		if err != nil {
			b, _ = json.Marshal(fmt.Sprint(cfg[k]))
		}
		items = append(items, Item{Key: k, ValueJSON: string(b)})
	}
	return items
}

// yamlKey quotes a key that YAML would not read as a plain string.
func yamlKey(k string) string {
	for _, c := range k {
		if !(c == '_' || c == '-' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b, _ := json.Marshal(k)
			return string(b)
		}
	}
	return k
}

// newID is a W&B-style run id: 8 characters of [a-z0-9].
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [8]byte
	rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}
