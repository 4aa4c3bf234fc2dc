// Package runs reads training runs back for the dashboard, its alerts and `replay --summary`
// (DESIGN §9, §17): rlhfstation's own run folders (events.jsonl) and those other tools write —
// a TRL / Hugging Face Trainer output folder (trainer_state.json, TensorBoard events,
// checkpoint-N/ adapters, completions/ tables), verl's file logger and TensorBoard folder,
// OpenRLHF's TensorBoard folder, and W&B run folders (wandb/run-*/run-*.wandb transaction logs,
// as any of those tools leave them with report_to="wandb").
//
// Detect finds what a folder holds and says so; Run.Stream turns it into the events the front
// ends read (run_start, step metrics under DESIGN §5's names, the monitor's anomalies computed
// as the metrics arrive, samples, checkpoints, run_end), following files that are still being
// written when asked. Files are read streaming: memory does not grow with their size.
package runs

import (
	"bufio"
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
	"strconv"
	"strings"

	"rlhfstation/engine/events"
)

// Kind is the tool that wrote a run.
type Kind string

const (
	KindOwn         Kind = "rlhfstation"
	KindTRL         Kind = "trl" // TRL and anything else on the Hugging Face Trainer (Unsloth)
	KindVerl        Kind = "verl"
	KindOpenRLHF    Kind = "openrlhf"
	KindTensorBoard Kind = "tensorboard" // event files whose tags no table knows
	KindWandb       Kind = "wandb"       // a W&B run whose names no table knows (rlhfstation's own)
)

// Label names the kind for people.
func (k Kind) Label() string {
	switch k {
	case KindOwn:
		return "rlhfstation"
	case KindTRL:
		return "TRL / Hugging Face Trainer"
	case KindVerl:
		return "verl"
	case KindOpenRLHF:
		return "OpenRLHF"
	case KindTensorBoard:
		return "TensorBoard"
	case KindWandb:
		return "W&B"
	}
	return "TensorBoard (which tool wrote it shows once its first scalars are written)"
}

// Format is how a run's metrics are stored.
type Format string

const (
	FormatEvents       Format = "events.jsonl"       // rlhfstation's own log
	FormatTrainerState Format = "trainer_state.json" // the Hugging Face Trainer's log_history
	FormatTensorBoard  Format = "tensorboard"        // events.out.tfevents.* files
	FormatVerlLog      Format = "verl jsonl"         // verl's file logger: {"step": N, "data": {...}}
	FormatWandb        Format = "wandb"              // a W&B transaction log, run-<id>.wandb
)

// Run is a run found on disk.
type Run struct {
	Dir    string // the run's folder
	Name   string // its name as shown: the folder's base name
	Kind   Kind   // "" for event files whose tags have not been seen yet
	Format Format
	// Source is the file (or, for TensorBoard, the folder) the metrics are read from.
	Source string
	// Files are the event files of a TensorBoard source, oldest first.
	Files []string
	// Samples says where completions were found ("" when none were).
	Samples string
	// Notes says what else was found: other metric sources not used, files skipped.
	Notes []string

	samples *sampleSet
}

// Searched is what Detect looks for, for the message when it finds nothing.
const Searched = "events.jsonl (rlhfstation), trainer_state.json in the folder or a checkpoint-N/ " +
	"folder (TRL / Hugging Face Trainer), events.out.tfevents.* files (TensorBoard: TRL, verl, " +
	"OpenRLHF), JSON lines of {\"step\", \"data\"} (verl's file logger) and W&B run files " +
	"(wandb/run-*/run-*.wandb, offline-run-*)"

// maxDepth and maxEntries bound the search of a folder.
const (
	maxDepth   = 4
	maxEntries = 20000
)

var (
	checkpointDir = regexp.MustCompile(`^checkpoint-(\d+)$`)
	tfeventsName  = regexp.MustCompile(`^events\.out\.tfevents\.`)
)

// found is what the search of a folder turned up.
type found struct {
	own        []string            // folders holding events.jsonl
	tfevents   map[string][]string // folder → event files
	states     []string            // trainer_state.json files
	verlLogs   []string            // verl file-logger JSONL files
	rollouts   []string            // verl rollout dumps: <step>.jsonl with input/output
	tables     []string            // TRL completions tables (parquet, wandb table JSON)
	wandbs     []string            // W&B transaction logs (run-<id>.wandb)
	hfFolders  int                 // checkpoint-N folders
	truncated  bool
	unreadable []string
}

// Detect finds the run at path: a run folder of any of the kinds above, or one of their files
// (events.jsonl, trainer_state.json, an event file, a verl JSONL log). The error says what was
// looked for when nothing is found.
func Detect(path string) (*Run, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist", path)
		}
		return nil, err
	}
	if !fi.IsDir() {
		return detectFile(path)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != filepath.Clean(path) {
		path = real // wandb/latest-run and other links to a run folder
	}
	if _, err := os.Stat(filepath.Join(path, "events.jsonl")); err == nil {
		r := &Run{Dir: path, Name: filepath.Base(absOr(path)), Kind: KindOwn, Format: FormatEvents,
			Source: filepath.Join(path, "events.jsonl")}
		return r, checkEvents(r.Source)
	}
	f := search(path)
	r := &Run{Dir: path, Name: filepath.Base(absOr(path))}
	switch {
	case len(f.own) > 0:
		sortNewest(f.own, "events.jsonl")
		return nil, fmt.Errorf("%s is not a run folder: it holds %d rlhfstation run(s); give one of them (%s)", path, len(f.own), listSome(f.own))
	case len(f.verlLogs) > 0:
		sortNewest(f.verlLogs, "")
		r.Kind, r.Format, r.Source = KindVerl, FormatVerlLog, f.verlLogs[0]
		if len(f.verlLogs) > 1 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d verl logs found; reading the newest (others: %s)", len(f.verlLogs), listSome(f.verlLogs[1:])))
		}
		if len(f.tfevents) > 0 {
			r.Notes = append(r.Notes, "TensorBoard events beside it are not read (the JSON log holds the same metrics at full precision)")
		}
	case len(f.tfevents) > 0:
		dirs := make([]string, 0, len(f.tfevents))
		for d := range f.tfevents {
			dirs = append(dirs, d)
		}
		sortNewestDirs(dirs, f.tfevents)
		r.Format, r.Source, r.Files = FormatTensorBoard, dirs[0], sortEventFiles(f.tfevents[dirs[0]])
		if len(dirs) > 1 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d TensorBoard folders found; reading the newest (give another folder to read it: %s)", len(dirs), listSome(dirs[1:])))
		}
		r.Kind = peekKind(r.Files)
		if r.Kind == "" && (len(f.states) > 0 || f.hfFolders > 0) {
			r.Kind = KindTRL
		}
		if len(f.states) > 0 {
			r.Notes = append(r.Notes, "trainer_state.json is not read for metrics (the event files hold every logged step, also while the run is live)")
		}
	case len(f.wandbs) > 0:
		sortNewest(f.wandbs, "")
		r.Format, r.Source = FormatWandb, f.wandbs[0]
		r.Kind = wandbKind(r.Source)
		if len(f.wandbs) > 1 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d W&B runs found; reading the newest (give another run's folder to read it: %s)", len(f.wandbs), listSome(f.wandbs[1:])))
		}
		if len(f.states) > 0 {
			r.Notes = append(r.Notes, "trainer_state.json is not read for metrics (the W&B run file holds every logged step, also while the run is live)")
		}
	case len(f.states) > 0:
		r.Kind, r.Format, r.Source = KindTRL, FormatTrainerState, newestState(path, f.states)
	default:
		msg := fmt.Sprintf("%s: no run found. Looked for %s, up to %d folders deep", path, Searched, maxDepth)
		if f.truncated {
			msg += fmt.Sprintf(" (stopped after %d entries)", maxEntries)
		}
		return nil, errors.New(msg)
	}
	r.samples = newSampleSet(path, f.tables, f.rollouts)
	r.Samples = r.samples.describe(path)
	if f.truncated {
		r.Notes = append(r.Notes, fmt.Sprintf("the search stopped after %d entries: give the run's own folder", maxEntries))
	}
	for _, u := range f.unreadable {
		r.Notes = append(r.Notes, "unreadable: "+u)
	}
	return r, nil
}

// detectFile takes a run's file given directly.
func detectFile(path string) (*Run, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	name := filepath.Base(absOr(dir))
	if checkpointDir.MatchString(name) { // a checkpoint's trainer_state.json: the run is its parent
		name = filepath.Base(filepath.Dir(absOr(dir)))
	}
	r := &Run{Dir: dir, Name: name, Source: path}
	switch {
	case base == "events.jsonl":
		r.Kind, r.Format = KindOwn, FormatEvents
		return r, checkEvents(path)
	case base == "trainer_state.json":
		r.Kind, r.Format = KindTRL, FormatTrainerState
	case tfeventsName.MatchString(base):
		r.Format, r.Source, r.Files = FormatTensorBoard, dir, []string{path}
		r.Kind = peekKind(r.Files)
	case strings.HasSuffix(base, ".wandb"):
		r.Format, r.Kind = FormatWandb, wandbKind(path)
	case strings.HasSuffix(base, ".jsonl"):
		switch sniffJSONL(path) {
		case "verl":
			r.Kind, r.Format, r.Name = KindVerl, FormatVerlLog, strings.TrimSuffix(base, ".jsonl")
		case "own":
			r.Kind, r.Format = KindOwn, FormatEvents
			return r, checkEvents(path)
		default:
			return nil, fmt.Errorf("%s: its first line is neither an rlhfstation event nor verl's {\"step\", \"data\"} record", path)
		}
	default:
		return nil, fmt.Errorf("%s: not a file this tool reads; give a run folder, or one of: events.jsonl, trainer_state.json, events.out.tfevents.*, a verl JSONL log, a W&B run-<id>.wandb", path)
	}
	if r.Kind != KindOwn {
		r.samples = newSampleSet(dir, nil, nil)
	}
	return r, nil
}

// search walks dir (maxDepth folders deep, maxEntries entries at most) for the files of a run.
func search(dir string) *found {
	f := &found{tfevents: map[string][]string{}}
	n := 0
	base := strings.Count(filepath.Clean(dir), string(filepath.Separator))
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir {
				f.unreadable = append(f.unreadable, fmt.Sprintf("%s (%v)", p, err))
			}
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if n++; n > maxEntries {
			f.truncated = true
			return fs.SkipAll
		}
		name := d.Name()
		depth := strings.Count(filepath.Clean(p), string(filepath.Separator)) - base
		if d.IsDir() {
			if p != dir && (strings.HasPrefix(name, ".") || name == "__pycache__" || name == "node_modules") {
				return fs.SkipDir
			}
			if checkpointDir.MatchString(name) {
				f.hfFolders++
			}
			if name == "wandb" {
				// Weights & Biases keeps logged tables deep inside: wandb/run-*/files/media/table/.
				t, _ := filepath.Glob(filepath.Join(p, "*", "files", "media", "table", "completions*.table.json"))
				f.tables = append(f.tables, t...)
				logs, _ := filepath.Glob(filepath.Join(p, "*", "*.wandb"))
				for _, l := range logs {
					if filepath.Base(filepath.Dir(l)) != "latest-run" { // a link to one of the others
						f.wandbs = append(f.wandbs, l)
					}
				}
				return fs.SkipDir
			}
			if depth >= maxDepth {
				return fs.SkipDir
			}
			return nil
		}
		switch {
		case name == "events.jsonl":
			f.own = append(f.own, filepath.Dir(p))
		case tfeventsName.MatchString(name):
			f.tfevents[filepath.Dir(p)] = append(f.tfevents[filepath.Dir(p)], p)
		case name == "trainer_state.json":
			f.states = append(f.states, p)
		case strings.HasSuffix(name, ".table.json") && strings.HasPrefix(name, "completions"):
			f.tables = append(f.tables, p)
		case strings.HasSuffix(name, ".parquet") && strings.HasPrefix(name, "completions"):
			f.tables = append(f.tables, p)
		case strings.HasSuffix(name, ".wandb") && strings.HasPrefix(name, "run-"):
			f.wandbs = append(f.wandbs, p)
		case strings.HasSuffix(name, ".jsonl"):
			switch sniffJSONL(p) {
			case "verl":
				f.verlLogs = append(f.verlLogs, p)
			case "rollout":
				f.rollouts = append(f.rollouts, p)
			}
		}
		return nil
	})
	return f
}

// checkEvents reads an rlhfstation events.jsonl through, so that a line that does not parse is
// reported (with its number) before any screen opens. A last line still being written is fine.
func checkEvents(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := events.NewReader(f, path)
	for {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// sniffJSONL reads a JSONL file's first line: "verl" for verl's file logger, "rollout" for
// verl's rollout dumps ({"input", "output", "step"…}), "own" for rlhfstation events, else "".
func sniffJSONL(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, _ := bufio.NewReaderSize(f, 1<<16).ReadSlice('\n')
	var head map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(line), &head) != nil {
		return ""
	}
	_, step := head["step"]
	_, data := head["data"]
	_, typ := head["type"]
	_, in := head["input"]
	_, out := head["output"]
	switch {
	case step && data && verlHead(head):
		return "verl"
	case in && out:
		return "rollout"
	case typ && step:
		return "own"
	}
	return ""
}

// peekKind reads the first records of an event file for its tags.
func peekKind(files []string) Kind {
	var tags []string
	for _, p := range files {
		tags = append(tags, firstTags(p, 256)...)
		if k := kindOfTags(tags); k != "" {
			return k
		}
	}
	return ""
}

// newestState is the trainer_state.json the metrics come from: the folder's own (written at
// the end of training) when there is one, else the one of the checkpoint with the highest step.
func newestState(dir string, states []string) string {
	best, bestStep := "", -1
	for _, s := range states {
		parent := filepath.Dir(s)
		if filepath.Clean(parent) == filepath.Clean(dir) {
			return s
		}
		if m := checkpointDir.FindStringSubmatch(filepath.Base(parent)); m != nil {
			if n, _ := strconv.Atoi(m[1]); n > bestStep {
				best, bestStep = s, n
			}
		} else if best == "" {
			best = s
		}
	}
	return best
}

// sortNewest orders paths by modification time, newest first (of path/name when name is set).
func sortNewest(paths []string, name string) {
	mt := func(p string) int64 {
		if name != "" {
			p = filepath.Join(p, name)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return fi.ModTime().UnixNano()
	}
	sort.SliceStable(paths, func(i, j int) bool { return mt(paths[i]) > mt(paths[j]) })
}

// sortNewestDirs orders TensorBoard folders by their newest event file, newest first.
func sortNewestDirs(dirs []string, files map[string][]string) {
	newest := map[string]int64{}
	for _, d := range dirs {
		for _, f := range files[d] {
			if fi, err := os.Stat(f); err == nil && fi.ModTime().UnixNano() > newest[d] {
				newest[d] = fi.ModTime().UnixNano()
			}
		}
	}
	sort.SliceStable(dirs, func(i, j int) bool {
		if newest[dirs[i]] != newest[dirs[j]] {
			return newest[dirs[i]] > newest[dirs[j]]
		}
		return dirs[i] < dirs[j]
	})
}

// sortEventFiles orders a folder's event files by the creation time in their names
// (events.out.tfevents.<seconds>.<host>…), oldest first.
func sortEventFiles(files []string) []string {
	stamp := func(p string) int64 {
		rest := strings.TrimPrefix(filepath.Base(p), "events.out.tfevents.")
		n, _ := strconv.ParseInt(strings.SplitN(rest, ".", 2)[0], 10, 64)
		return n
	}
	sort.SliceStable(files, func(i, j int) bool {
		if a, b := stamp(files[i]), stamp(files[j]); a != b {
			return a < b
		}
		return files[i] < files[j]
	})
	return files
}

func listSome(paths []string) string {
	if len(paths) > 3 {
		return strings.Join(paths[:3], ", ") + fmt.Sprintf(" and %d more", len(paths)-3)
	}
	return strings.Join(paths, ", ")
}

func absOr(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// Describe says in one line what was found.
func (r *Run) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s run", r.Kind.Label())
	src := r.rel(r.Source)
	switch r.Format {
	case FormatTensorBoard:
		fmt.Fprintf(&b, ": metrics from TensorBoard events in %s (%d file(s))", src, len(r.Files))
	default:
		fmt.Fprintf(&b, ": metrics from %s", src)
	}
	if r.Samples != "" {
		b.WriteString("; completions from " + r.Samples)
	} else if r.Kind != KindOwn {
		b.WriteString("; no completions logged")
	}
	return b.String()
}

// rel shows p relative to the run folder when it lies inside it.
func (r *Run) rel(p string) string {
	if rel, err := filepath.Rel(r.Dir, p); err == nil && !strings.HasPrefix(rel, "..") {
		if rel == "." {
			return p
		}
		return rel
	}
	return p
}
