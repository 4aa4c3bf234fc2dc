// Package engine is the in-process GRPO trainer (DESIGN §3, §5): it loads a model folder,
// quantizes the frozen base, attaches LoRA adapters, and loops over prompt batches —
// generate, reward, advantage, loss, backward into the adapters, AdamW — emitting run events
// (DESIGN §9) to its sinks and to the front end that drives it. The reference model and the
// perplexity scorer are the same base with the adapters switched off.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/config"
	"rlhfstation/engine/control"
	"rlhfstation/engine/data"
	"rlhfstation/engine/events"
	"rlhfstation/engine/grpo"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/engine/monitor"
	"rlhfstation/engine/optim"
	"rlhfstation/engine/tensorboard"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/engine/wandb"
	"rlhfstation/internal/runlock"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// Options are what a front end gives New besides the configuration.
type Options struct {
	// ModelDir is the resolved model folder (the built-in model's when the config names none).
	ModelDir string
	// ModelName is how events name the model ("built-in" or the folder).
	ModelName string
	// Prompts are used when the config names no data file; nil for the built-in prompts of
	// the preset's domain.
	Prompts []data.Example
	// Resume is a run folder to continue, "" for a new run.
	Resume string
	// Log receives progress lines of the set-up (model loading, baselines) before the events
	// start flowing; may be nil.
	Log func(format string, a ...any)
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// Engine is one GRPO run. Create it with New, drive it with Run in a goroutine, read its
// events from Events, and steer it with Pause, Resume, SaveNow and Stop.
type Engine struct {
	cfg         *config.Config
	opts        Options
	preset      presets.Preset
	model       *model.Model
	tok         *tokenizer.Tokenizer
	adapters    *lora.Set
	modules     []*adapter
	opt         *optim.AdamW
	params      []*optim.Param
	sched       optim.Schedule
	funcs       []rewards.Weighted
	digits      *rewards.DigitVocab
	prompts     []data.Example
	evalPrompts []data.Example // what evaluation during training runs on (evalsteps.go)
	base        rewards.Baselines
	mon         *monitor.Monitor
	sampler     monitor.Sampler

	dev     backend.Backend // where it computes (OpenDevice)
	device  string          // its label for events
	runDir  string
	runName string
	step    int // optimizer steps done
	cursor  int // prompts consumed so far, across epochs
	order   []int
	orderOf int // the epoch order holds
	// gen is the generation batch being served (generation.go); tokensSeen counts the prompt
	// and completion tokens sampled since the run began (TRL's num_tokens).
	gen        *generation
	tokensSeen int64
	init       *initAdapter // the adapter a new run starts from (init_adapter), nil for fresh ones

	jsonl     *events.Writer
	jsonlFile *os.File
	tb        *tensorboard.Writer
	wb        *wandb.Writer // [report] to = ["wandb"]: a W&B offline run in the run folder
	out       chan events.Event

	ctrl      chan request
	files     *control.Reader // the run folder's control.json (rlhfstation control, watch)
	queued    []queuedRequest // read from it, not acted on yet
	stopOn    []string        // [monitor] stop_on
	stopWhy   string          // set when an alert named in stopOn fired: the run stops after the step
	trainTape *model.Tape
	setupLog  []string
	badSteps  int
	entropy   *grpo.AdaptiveEntropy // the entropy bonus's coefficient (entropy.go), nil without one
	saveFails int                   // checkpoint saves failed in a row
	lock      *runlock.Lock
	made      string // the run folder New created, removed if the start fails
	lastCkpt  string
	lastStep  events.Metrics
	paramInfo events.Params
	start     time.Time
	mu        sync.Mutex
	closed    bool

	commandLogs []*os.File // the command rewards' stderr copies

	envs       []*envRun // the environments of multi-turn rollouts (episode.go)
	episodeSeq int       // episodes started, for their ids
	prefilled  int       // tokens the episodes' turns prefilled
	rePrefill  bool      // tests: each turn prefills its whole history (the cache emptied), the reference for the continued cache
}

type request int

const (
	ctrlPause request = iota
	ctrlResume
	ctrlSave
	ctrlStop
)

// ErrStopped is returned by Run when Stop ended the run early (after saving).
var ErrStopped = errors.New("run stopped")

func (e *Engine) now() time.Time {
	if e.opts.Now != nil {
		return e.opts.Now()
	}
	return time.Now()
}

// logf reports progress. Lines of the set-up (before Run) are also kept and emitted as log
// events once the run starts, so a front end that shows events sees them.
func (e *Engine) logf(format string, a ...any) {
	if e.opts.Log != nil {
		e.opts.Log(format, a...)
	}
	if e.start.IsZero() {
		e.setupLog = append(e.setupLog, fmt.Sprintf(format, a...))
	}
}

// Events is the stream of run events. It is closed when Run returns. A front end must keep
// reading it: the engine waits for room rather than drop events.
func (e *Engine) Events() <-chan events.Event { return e.out }

// RunDir is the run folder.
func (e *Engine) RunDir() string { return e.runDir }

// Config is the resolved configuration.
func (e *Engine) Config() *config.Config { return e.cfg }

func (e *Engine) send(c request) error {
	select {
	case e.ctrl <- c:
		return nil
	default:
		return errors.New("the engine is busy with earlier requests")
	}
}

// Pause holds the run after the step in progress.
func (e *Engine) Pause() error { return e.send(ctrlPause) }

// Resume continues a paused run.
func (e *Engine) Resume() error { return e.send(ctrlResume) }

// SaveNow writes a checkpoint after the step in progress.
func (e *Engine) SaveNow() error { return e.send(ctrlSave) }

// Stop ends the run after the step in progress, saving a checkpoint first.
func (e *Engine) Stop() error { return e.send(ctrlStop) }

// emit writes an event to the sinks and passes it to the front end.
func (e *Engine) emit(ev events.Event) {
	if ev.Time.IsZero() {
		ev.Time = e.now().UTC()
	}
	if e.jsonl != nil {
		if err := e.jsonl.Write(ev); err != nil {
			e.logf("writing events.jsonl: %v", err)
		}
	}
	e.report(ev)
	e.out <- ev
}

// flush makes every sink durable: called once per step.
func (e *Engine) flush() {
	if e.jsonl != nil {
		if err := e.jsonl.Flush(); err != nil {
			e.logf("flushing events.jsonl: %v", err)
		}
	}
	if e.tb != nil {
		if err := e.tb.Flush(); err != nil {
			e.logf("flushing TensorBoard events: %v", err)
		}
	}
	if e.wb != nil {
		if err := e.wb.Flush(); err != nil {
			e.logf("flushing the W&B run: %v", err)
		}
	}
}

// report writes an event to the W&B run: a step's metrics as a history record, run_end as the
// summary and the exit record (exit code 1 when the run failed).
func (e *Engine) report(ev events.Event) {
	if e.wb == nil {
		return
	}
	var err error
	switch ev.Type {
	case events.Step:
		err = e.wb.Log(int64(ev.Step), ev.Time, ev.Metrics)
	case events.RunEnd:
		code := 0
		if ev.Status == "failed" {
			code = 1
		}
		err = e.wb.Finish(code, ev.Time)
	}
	if err != nil {
		e.logf("writing the W&B run: %v", err)
		e.wb.Close()
		e.wb = nil
	}
}

func (e *Engine) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	e.closeCommands()
	e.closeEnvironments()
	e.flush()
	if e.jsonlFile != nil {
		e.jsonlFile.Close()
	}
	if e.tb != nil {
		e.tb.Close()
	}
	if e.wb != nil {
		e.wb.Close()
	}
	e.lock.Release()
	e.closeDevice()
	close(e.out)
}

// closeDevice waits for the device's queued work and releases it.
func (e *Engine) closeDevice() {
	if e.dev != nil {
		if err := e.dev.Close(); err != nil {
			e.logf("closing the device: %v", err)
		}
		e.dev = nil
	}
}

// stepRNG is the generator of one step's randomness (sampling seeds, LoRA dropout). It is a
// function of the seed and the step alone, so a resumed run draws exactly what an
// uninterrupted one would, with no generator state to carry.
func (e *Engine) stepRNG(step, stream int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(e.cfg.Seed), uint64(step)<<16|uint64(stream)))
}

// Run trains until max_steps, a Stop, a cancelled ctx (treated as an interrupt: it saves
// and returns ErrInterrupted) or a failure. It closes Events when it returns.
func (e *Engine) Run(ctx context.Context) (err error) {
	defer e.close()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("engine failure at step %d: %v", e.step+1, r)
			e.emit(events.Event{Type: events.RunEnd, Step: e.step, Status: "failed", Reason: err.Error()})
		}
	}()
	e.start = e.now()
	for _, c := range e.commandRewards() {
		c.SetContext(ctx) // an interrupt does not wait for a reward command's reply
	}
	e.sampler.Start(e.start)
	e.emitRunStart()
	for _, line := range e.setupLog {
		e.emit(events.Event{Type: events.Log, Step: e.step, Level: "info", Message: line})
	}
	e.flush()
	e.files = control.NewReader(e.runDir)
	paused := false
	for e.step < e.cfg.MaxSteps {
		// Requests first: a pause holds here until resume, save or stop.
		for {
			c, by, why, got := e.nextRequest(ctx, paused)
			if ctx.Err() != nil {
				return e.finish("interrupted", "interrupted by a signal", ErrInterrupted)
			}
			if !got {
				break
			}
			switch c {
			case ctrlPause:
				if !paused {
					paused = true
					e.emit(events.Event{Type: events.Log, Step: e.step, Level: "info", Control: string(control.Pause),
						Message: fmt.Sprintf("paused after step %d%s", e.step, by)})
					e.flush()
				}
			case ctrlResume:
				if paused {
					paused = false
					e.emit(events.Event{Type: events.Log, Step: e.step, Level: "info", Control: string(control.Resume),
						Message: fmt.Sprintf("resumed after step %d%s", e.step, by)})
				}
			case ctrlSave:
				e.emit(events.Event{Type: events.Log, Step: e.step, Level: "info", Control: string(control.Save),
					Message: fmt.Sprintf("saving a checkpoint of step %d%s", e.step, by)})
				if err := e.saveOrStop(); err != nil {
					return err
				}
				e.flush()
			case ctrlStop:
				e.emit(events.Event{Type: events.Log, Step: e.step, Level: "info", Control: string(control.Stop),
					Message: fmt.Sprintf("stopping after step %d, saving first%s", e.step, by)})
				reason := "stopped by the user"
				if why != "" {
					reason += ": " + why
				}
				return e.finish("stopped", reason, ErrStopped)
			}
			// Loop: drain further requests before computing, or wait while paused.
		}
		if err := e.trainStep(ctx); err != nil {
			if stopped, serr := e.stopForCommand(err); stopped {
				return serr
			}
			if errors.Is(err, errNonFiniteStop) {
				e.emit(events.Event{Type: events.RunEnd, Step: e.step, Status: "failed", Reason: err.Error()})
				return err
			}
			if ctx.Err() != nil {
				return e.finish("interrupted", "interrupted by a signal", ErrInterrupted)
			}
			e.emit(events.Event{Type: events.RunEnd, Step: e.step, Status: "failed", Reason: err.Error()})
			return err
		}
		if e.stopWhy != "" {
			e.emit(events.Event{Type: events.Log, Step: e.step, Level: "warn", Control: string(control.Stop),
				Message: fmt.Sprintf("stopping after step %d, saving first (%s)", e.step, e.stopWhy)})
			return e.finish("stopped", e.stopWhy, &AlertStopError{Reason: e.stopWhy})
		}
		if e.cfg.SaveSteps > 0 && e.step%e.cfg.SaveSteps == 0 && e.step < e.cfg.MaxSteps {
			if err := e.saveOrStop(); err != nil {
				return err
			}
		}
		e.flush()
	}
	return e.finish("completed", "", nil)
}

// nextRequest takes the next request, from the front end (Pause…) or from the run folder's
// control file; while paused it waits for one, polling the file. by says who asked, for the
// acknowledgement, and why the reason given with it. got is false when there is none (or ctx
// ended).
func (e *Engine) nextRequest(ctx context.Context, paused bool) (c request, by, why string, got bool) {
	for {
		select {
		case c = <-e.ctrl:
			return c, "", "", true
		default:
		}
		reqs, err := e.files.Poll()
		if err != nil {
			e.logf("reading the control file: %v", err)
		}
		for _, q := range reqs {
			c := map[control.Action]request{control.Pause: ctrlPause, control.Resume: ctrlResume,
				control.Save: ctrlSave, control.Stop: ctrlStop}[q.Action]
			e.queued = append(e.queued, queuedRequest{c, q.By, q.Reason})
		}
		if len(e.queued) > 0 {
			q := e.queued[0]
			e.queued = e.queued[1:]
			if q.by != "" {
				q.by = " (asked by " + q.by + ")"
			}
			return q.c, q.by, q.why, true
		}
		if !paused {
			return 0, "", "", false
		}
		select {
		case c = <-e.ctrl:
			return c, "", "", true
		case <-ctx.Done():
			return 0, "", "", false
		case <-time.After(controlPoll):
		}
	}
}

// controlPoll is how often a paused run reads its control file.
const controlPoll = 200 * time.Millisecond

// queuedRequest is a control-file request not acted on yet.
type queuedRequest struct {
	c   request
	by  string
	why string
}

// AlertStopError is returned by Run when an alert named in [monitor] stop_on stopped the run
// (after saving): Reason names the rule and the step.
type AlertStopError struct{ Reason string }

func (e *AlertStopError) Error() string { return "the run stopped on an alert: " + e.Reason }
func (e *AlertStopError) Unwrap() error { return ErrStopped }

// ErrInterrupted is returned by Run when its context was cancelled (SIGINT, SIGTERM): the
// run saved a checkpoint first.
var ErrInterrupted = errors.New("run interrupted")

// finish saves a final checkpoint and emits run_end.
func (e *Engine) finish(status, reason string, ret error) error {
	if e.step > 0 && (e.lastCkpt == "" || filepath.Base(e.lastCkpt) != checkpoint.Name(e.step)) {
		if err := e.save(); err != nil {
			e.emit(events.Event{Type: events.RunEnd, Step: e.step, Status: "failed", Reason: "saving the final checkpoint: " + err.Error()})
			return err
		}
	}
	e.emit(events.Event{Type: events.RunEnd, Step: e.step, Status: status, Reason: reason, Path: e.lastCkpt})
	return ret
}
