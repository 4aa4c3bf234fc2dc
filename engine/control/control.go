// Package control is the run folder's control channel: control.json, a small JSON file that
// rlhfstation writes atomically (watch's keys, `rlhfstation control`, a stop_on guard) and a
// trainer reads at each step boundary — rlhfstation's own engine, and the TRL callback of
// examples/rlhfstation_callback.py, which reads the same fields.
//
// The file holds counters rather than one pending request, so that requests made faster than
// the trainer reads them (save, then stop) are all seen: a reader remembers the counters it
// acted on, and a new reader takes the file's counters as already handled, so a file left by
// an earlier run asks nothing of the next one.
package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"rlhfstation/internal/atomicfile"
)

// File is the control file's name inside a run folder.
const File = "control.json"

// Action is one request.
type Action string

const (
	Pause  Action = "pause"
	Resume Action = "resume"
	Save   Action = "save"
	Stop   Action = "stop" // saves a checkpoint first
)

// Actions lists them in the order the usage shows.
var Actions = []Action{Pause, Resume, Save, Stop}

// State is the file's content.
type State struct {
	Version int   `json:"version"`
	Seq     int64 `json:"seq"`    // bumped by every request
	Paused  bool  `json:"paused"` // the state asked for
	Saves   int64 `json:"saves"`  // save requests so far
	Stops   int64 `json:"stops"`  // stop requests so far
	// The last request: what, why (a stop_on stop names its rule and step), who, when.
	Action Action    `json:"action,omitempty"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	Time   time.Time `json:"time"`
}

// Path is the control file of run folder dir.
func Path(dir string) string { return filepath.Join(dir, File) }

// Read reads dir's control file; a missing one is the zero State.
func Read(dir string) (State, error) {
	var s State
	b, err := os.ReadFile(Path(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %v", Path(dir), err)
	}
	return s, nil
}

// Send records request a in dir's control file (by says who asks, reason why; both may be
// empty). Two writers at the same instant may lose one request: the file has one writer in
// practice (a person, or one guard).
func Send(dir string, a Action, by, reason string) (State, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return State{}, fmt.Errorf("%s is not a run folder", dir)
	}
	s, err := Read(dir)
	if err != nil {
		return s, err
	}
	switch a {
	case Pause:
		s.Paused = true
	case Resume:
		s.Paused = false
	case Save:
		s.Saves++
	case Stop:
		s.Stops++
	default:
		return s, fmt.Errorf("%q is not a request: use pause, resume, save or stop", a)
	}
	s.Version, s.Seq, s.Action, s.Reason, s.By, s.Time = 1, s.Seq+1, a, reason, by, time.Now().UTC()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return s, err
	}
	return s, atomicfile.WriteFile(Path(dir), append(b, '\n'), 0o644)
}

// Request is one request a reader has to act on.
type Request struct {
	Action Action
	Reason string // for a stop: why ("" when a person asked)
	By     string
}

// Reader follows a run's control file from the trainer's side.
type Reader struct {
	dir    string
	seq    int64
	paused bool
	saves  int64
	stops  int64
}

// NewReader starts following dir's control file: what it holds now counts as handled.
func NewReader(dir string) *Reader {
	r := &Reader{dir: dir}
	if s, err := Read(dir); err == nil {
		r.seq, r.saves, r.stops = s.Seq, s.Saves, s.Stops
	}
	return r
}

// Poll returns the requests made since the last call, in the order a trainer acts on them:
// pause or resume (when the state asked for changed), save (once, however many were asked),
// stop. A file that does not parse is an error (the next Poll tries again).
func (r *Reader) Poll() ([]Request, error) {
	s, err := Read(r.dir)
	if err != nil || s.Seq == r.seq {
		return nil, err
	}
	r.seq = s.Seq
	var out []Request
	last := func(a Action) Request {
		q := Request{Action: a, By: s.By}
		if s.Action == a {
			q.Reason = s.Reason
		}
		return q
	}
	if s.Paused != r.paused {
		r.paused = s.Paused
		a := Resume
		if s.Paused {
			a = Pause
		}
		out = append(out, last(a))
	}
	if s.Saves > r.saves {
		r.saves = s.Saves
		out = append(out, last(Save))
	}
	if s.Stops > r.stops {
		r.stops = s.Stops
		out = append(out, last(Stop))
	}
	return out, nil
}

// Controller steers a run through its control file: the dashboard's keys for a run it
// follows on disk.
type Controller struct {
	Dir string
	By  string // written in the requests ("watch")
}

func (c Controller) send(a Action) error {
	_, err := Send(c.Dir, a, c.By, "")
	return err
}

func (c Controller) Pause() error   { return c.send(Pause) }
func (c Controller) Resume() error  { return c.send(Resume) }
func (c Controller) SaveNow() error { return c.send(Save) }
func (c Controller) Stop() error    { return c.send(Stop) }
