package runs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/tensorboard"
	"rlhfstation/internal/pyjson"
)

var statFile = os.Stat

// tbSource reads a TensorBoard folder's event files in order, following the newest. A step's
// scalars arrive as separate records (one add_scalar each); they are gathered until the step
// number changes, or, when following, until the file has been quiet for a moment.
type tbSource struct {
	dir   string
	files []string

	cur    rawStep
	lastAt time.Time // when the last record was read
}

func (s *tbSource) run(p *pipeline) error {
	for i := 0; i < len(s.files) && p.alive() && !p.ended; i++ {
		s.readFile(p, s.files[i], func() bool { return i == len(s.files)-1 })
	}
	s.flush(p)
	return nil
}

// readFile reads one event file; isLast says whether it is the newest, the one followed.
func (s *tbSource) readFile(p *pipeline, path string, isLast func() bool) {
	f, err := os.Open(path)
	if err != nil {
		p.warn(path, fmt.Sprintf("%s: %v (skipped)", path, err))
		return
	}
	defer f.Close()
	rd := tensorboard.NewReader(f, path)
	for {
		ev, err := rd.Next()
		var ce *tensorboard.CorruptError
		switch {
		case err == nil:
			s.lastAt = time.Now()
			if !s.add(p, ev) || p.ended {
				return
			}
			continue
		case errors.As(err, &ce) && ce.Skipped:
			p.warn("damaged records in "+path, ce.Error()+" (skipped)")
			continue
		case errors.As(err, &ce):
			p.warn(path, ce.Error()+": the rest of the file is not read")
			return
		case err != io.EOF && !errors.Is(err, tensorboard.ErrIncomplete):
			p.warn(path, err.Error())
			return
		}
		// The end of what is written so far.
		if !isLast() || !p.o.Follow {
			if errors.Is(err, tensorboard.ErrIncomplete) {
				p.warn(path+" torn", err.Error()+": the last record is incomplete (a writer was still appending, or the file was cut); it is left out")
			}
			return
		}
		if !s.cur.empty() && time.Since(s.lastAt) >= p.o.settle() {
			s.flush(p)
			if !p.alive() || p.ended {
				return
			}
		}
		if more := s.newFiles(); len(more) > 0 && s.cur.empty() {
			// A newer file takes over (a restarted run writes a new one).
			s.files = append(s.files, more...)
			continue
		}
		if !p.idle() || !p.wait() {
			return
		}
	}
}

// add gathers one event into the step in hand, sending that step when a new one begins.
func (s *tbSource) add(p *pipeline, ev tensorboard.Event) bool {
	if len(ev.Values) == 0 {
		return true
	}
	step := int(ev.Step)
	if !s.cur.empty() && step != s.cur.Step {
		s.flush(p)
		if !p.alive() {
			return false
		}
	}
	if s.cur.empty() {
		s.cur = rawStep{Step: step, Values: map[string]float64{}}
	}
	if ev.WallTime > 0 {
		sec, frac := math.Modf(ev.WallTime)
		s.cur.Time = time.Unix(int64(sec), int64(frac*1e9))
	}
	for _, v := range ev.Values {
		switch v.Kind {
		case tensorboard.Scalar:
			s.cur.Values[v.Tag] = v.Value
		case tensorboard.Text:
			if s.cur.Texts == nil {
				s.cur.Texts = map[string]string{}
			}
			s.cur.Texts[v.Tag] = v.Text
		}
	}
	return true
}

func (s *tbSource) flush(p *pipeline) {
	if !s.cur.empty() {
		st := s.cur
		s.cur = rawStep{}
		p.step(st)
	}
}

// newFiles lists event files of the folder that are not known yet, oldest first.
func (s *tbSource) newFiles() []string {
	known := map[string]bool{}
	for _, f := range s.files {
		known[f] = true
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(s.dir, e.Name())
		if !e.IsDir() && tfeventsName.MatchString(e.Name()) && !known[p] {
			out = append(out, p)
		}
	}
	return sortEventFiles(out)
}

// firstTags reads up to n records of an event file and returns the tags of their values.
func firstTags(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	rd := tensorboard.NewReader(f, path)
	var tags []string
	for i := 0; i < n; i++ {
		ev, err := rd.Next()
		if err != nil {
			var ce *tensorboard.CorruptError
			if errors.As(err, &ce) && ce.Skipped {
				continue
			}
			break
		}
		for _, v := range ev.Values {
			tags = append(tags, v.Tag)
		}
	}
	return tags
}

// historySource reads a Hugging Face trainer_state.json's log_history. When following, it
// reads the trainer_state.json of each new checkpoint-N folder (the Trainer writes the file only
// when it saves), sending the steps it had not sent.
type historySource struct {
	last    int // the last step sent
	path    string
	modTime time.Time
}

func (s *historySource) run(p *pipeline) error {
	s.last = math.MinInt
	s.path = p.run.Source
	if err := s.read(p); err != nil {
		return err
	}
	for p.o.Follow && p.alive() && !p.ended {
		if !p.idle() || !p.wait() {
			return nil
		}
		newest := newestStateIn(p.run.Dir)
		if newest == "" {
			continue
		}
		fi, err := os.Stat(newest)
		if err != nil || (newest == s.path && !fi.ModTime().After(s.modTime)) {
			continue
		}
		s.path = newest
		if err := s.read(p); err != nil {
			p.warn(newest, err.Error())
		}
	}
	return nil
}

func (s *historySource) read(p *pipeline) error {
	if fi, err := os.Stat(s.path); err == nil {
		s.modTime = fi.ModTime()
	}
	var cur rawStep
	send := func() bool {
		if cur.empty() {
			return true
		}
		ok := p.step(cur)
		s.last = max(s.last, cur.Step)
		cur = rawStep{}
		return ok && p.alive()
	}
	_, err := checkpoint.ReadTrainerStateFunc(s.path, func(e checkpoint.LogEntry) error {
		step := int(e["step"])
		if !cur.empty() && step != cur.Step && !send() {
			return errStop
		}
		if step <= s.last {
			return nil
		}
		if cur.empty() {
			cur = rawStep{Step: step, Values: map[string]float64{}}
		}
		for k, v := range e {
			if k != "step" {
				cur.Values[k] = v
			}
		}
		return nil
	})
	if err == errStop {
		return nil
	}
	send()
	return err
}

var errStop = errors.New("stop")

// newestStateIn is the trainer_state.json of the folder's newest checkpoint (or its own).
func newestStateIn(dir string) string {
	var states []string
	if _, err := os.Stat(filepath.Join(dir, checkpoint.TrainerStateFile)); err == nil {
		states = append(states, filepath.Join(dir, checkpoint.TrainerStateFile))
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && checkpointDir.MatchString(e.Name()) {
			p := filepath.Join(dir, e.Name(), checkpoint.TrainerStateFile)
			if _, err := os.Stat(p); err == nil {
				states = append(states, p)
			}
		}
	}
	if len(states) == 0 {
		return ""
	}
	return newestState(dir, states)
}

// plannedSteps is max_steps of the run's newest trainer_state.json (Hugging Face Trainer).
func plannedSteps(r *Run) int {
	if r.Kind != KindTRL && r.Kind != "" {
		return 0
	}
	p := newestStateIn(r.Dir)
	if p == "" {
		return 0
	}
	st, err := checkpoint.ReadTrainerStateFunc(p, nil)
	if err != nil {
		return 0
	}
	return st.MaxSteps
}

// baseModel is the base_model_name_or_path of the run's adapter config (its folder's own,
// else its newest checkpoint's), or "".
func baseModel(dir string) string {
	try := func(p string) string {
		c, err := checkpoint.ReadAdapterConfig(filepath.Join(p, checkpoint.AdapterConfigFile))
		if err != nil {
			return ""
		}
		return c.BaseModel
	}
	if m := try(dir); m != "" {
		return m
	}
	cps, _ := Checkpoints(dir)
	for i := len(cps) - 1; i >= 0; i-- {
		if m := try(cps[i].Path); m != "" {
			return m
		}
	}
	return ""
}

// verlSource reads verl's file logger: one JSON object a line, {"step": N, "data": {name:
// value}}, written by orjson (non-finite floats as null). A last line without its newline is
// still being written; a line that does not parse is reported and skipped.
type verlSource struct{}

func (verlSource) run(p *pipeline) error {
	path := p.run.Source
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var part []byte
	var cur rawStep
	lineNo := 0
	flush := func() bool {
		if cur.empty() {
			return true
		}
		ok := p.step(cur)
		cur = rawStep{}
		return ok && p.alive()
	}
	var lastData time.Time
	for {
		chunk, err := br.ReadSlice('\n')
		part = append(part, chunk...)
		if err == bufio.ErrBufferFull {
			if len(part) > 64<<20 {
				return fmt.Errorf("%s:%d: a line longer than 64 MiB", path, lineNo+1)
			}
			continue
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err == io.EOF {
			// part holds a line still being written (or a torn end).
			if !p.o.Follow {
				if len(bytes.TrimSpace(part)) > 0 {
					p.warn(path+" torn", fmt.Sprintf("%s:%d: the last line has no end (a writer was still appending, or the file was cut); it is left out", path, lineNo+1))
				}
				flush()
				return nil
			}
			if !cur.empty() && time.Since(lastData) >= p.o.settle() && !flush() {
				return nil
			}
			if p.ended || !p.idle() || !p.wait() {
				return nil
			}
			continue
		}
		line := bytes.TrimSpace(part)
		part = part[:0]
		lineNo++
		lastData = time.Now()
		if len(line) == 0 {
			continue
		}
		step, values, perr := parseVerlLine(line)
		if perr != nil {
			p.warn("bad lines in "+path, fmt.Sprintf("%s:%d: %v (line skipped)", path, lineNo, perr))
			continue
		}
		if !cur.empty() && step != cur.Step && !flush() {
			return nil
		}
		if cur.empty() {
			cur = rawStep{Step: step, Values: map[string]float64{}}
		}
		for k, v := range values {
			cur.Values[k] = v
		}
	}
}

// parseVerlLine reads {"step": N, "data": {...}}: numbers are kept, null is a non-finite value
// (orjson's spelling of NaN and infinities), other values are skipped.
func parseVerlLine(line []byte) (int, map[string]float64, error) {
	var rec struct {
		Step *json.Number               `json:"step"`
		Data map[string]json.RawMessage `json:"data"`
	}
	dec := json.NewDecoder(pyjson.NewReader(bytes.NewReader(line)))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		return 0, nil, err
	}
	if rec.Step == nil {
		return 0, nil, errors.New(`no "step"`)
	}
	step, err := strconv.ParseFloat(string(*rec.Step), 64)
	if err != nil || step != math.Trunc(step) {
		return 0, nil, fmt.Errorf("step %s is not a whole number", *rec.Step)
	}
	out := make(map[string]float64, len(rec.Data))
	for k, raw := range rec.Data {
		if string(raw) == "null" {
			out[k] = math.NaN()
			continue
		}
		if v, ok := pyjson.Number(raw); ok {
			out[k] = v
		}
	}
	return int(step), out, nil
}
