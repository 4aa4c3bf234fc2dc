package engine

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/config"
	"rlhfstation/engine/events"
	"rlhfstation/engine/model"
	"rlhfstation/engine/monitor"
	"rlhfstation/internal/atomicfile"
	"rlhfstation/internal/diskfree"
	"rlhfstation/internal/human"
	"rlhfstation/internal/runlock"
)

// maxSaveFails checkpoint saves failed in a row stop the run: a full or failing disk would
// otherwise let it train to the end with nothing kept.
const maxSaveFails = 2

// saveOrStop saves a checkpoint. A failure is a critical anomaly event; the second in a row
// ends the run, naming its last good checkpoint.
func (e *Engine) saveOrStop() error {
	err := e.save()
	if err == nil {
		e.saveFails = 0
		return nil
	}
	e.saveFails++
	e.emit(events.Event{Type: events.Anomaly, Step: e.step, Rule: "checkpoint_failed", Metric: "checkpoint", Severity: events.Critical,
		Message: fmt.Sprintf("checkpoint of step %d not saved (%d in a row; %d stop the run): %v", e.step, e.saveFails, maxSaveFails, err)})
	if e.saveFails < maxSaveFails {
		return nil
	}
	last := "none was saved"
	if e.lastCkpt != "" {
		last = "the last good one is " + e.lastCkpt
	}
	stop := fmt.Errorf("the run stopped at step %d: %d checkpoint saves failed in a row (%v); %s", e.step, e.saveFails, err, last)
	e.emit(events.Event{Type: events.RunEnd, Step: e.step, Status: "failed", Reason: stop.Error(), Path: e.lastCkpt})
	return stop
}

// checkpointBytes is what a checkpoint of this run takes on disk: the adapter weights and
// AdamW's two moments (float32 each), with room for the JSON files.
func (e *Engine) checkpointBytes() uint64 {
	return 12*uint64(e.adapters.Count()) + 64<<10
}

// save writes the checkpoint of the current step (PEFT adapter, AdamW state, trainer state),
// prunes old ones to save_total_limit, and emits a checkpoint event with its health.
func (e *Engine) save() error {
	if e.step == 0 {
		return nil
	}
	// The log first: a checkpoint must never be ahead of events.jsonl, or a resume from it
	// would leave its steps out of the log.
	e.flush()
	dir := filepath.Join(e.runDir, "checkpoints", checkpoint.Name(e.step))
	gen, err := e.marshalGeneration()
	if err != nil {
		return fmt.Errorf("saving checkpoint: the generation batch in use: %w", err)
	}
	need := e.checkpointBytes() + uint64(len(gen))
	if free, ok := diskfree.Bytes(e.runDir); ok && free < need {
		return fmt.Errorf("saving checkpoint %s: only %s free on its disk, it needs about %s",
			dir, human.Bytes(int64(free)), human.Bytes(int64(need)))
	}
	opt := &checkpoint.Optimizer{Step: e.opt.Step, LearningRate: e.cfg.LearningRate * e.sched.Factor(max(e.step-1, 0)),
		Beta1: e.opt.Beta1, Beta2: e.opt.Beta2, Eps: e.opt.Eps, WeightDecay: e.opt.WeightDecay,
		ExpAvg: map[string][]float32{}, ExpAvgSq: map[string][]float32{}}
	b := e.model.Backend()
	for _, p := range e.params {
		m, v := make([]float32, p.M.Len()), make([]float32, p.V.Len())
		if err := b.Download(m, p.M); err != nil {
			return fmt.Errorf("saving checkpoint: optimizer state of %s: %w", p.Name, err)
		}
		if err := b.Download(v, p.V); err != nil {
			return fmt.Errorf("saving checkpoint: optimizer state of %s: %w", p.Name, err)
		}
		opt.ExpAvg[p.Name], opt.ExpAvgSq[p.Name] = m, v
	}
	tensors, err := e.adapters.Tensors()
	if err != nil {
		return fmt.Errorf("saving checkpoint: %w", err)
	}
	state := &checkpoint.TrainerState{GlobalStep: e.step, LearningRate: opt.LearningRate, DataCursor: e.cursor,
		Epoch: float64(e.cursor / max(len(e.prompts), 1)), RNGState: fmt.Sprintf("pcg seed=%d stream=step<<16|k", e.cfg.Seed),
		ConfigHash: e.cfg.Hash(), Metrics: e.lastStep, ScheduleSteps: e.sched.Total, WarmupSteps: e.sched.Warmup,
		NumInputTokensSeen: e.tokensSeen}
	if a := e.entropy; a != nil {
		coef, last := a.Coef, a.Last
		state.EntropyCoef = &coef
		if !math.IsInf(last, 0) && !math.IsNaN(last) { // none yet, or a step without a finite one
			state.EntropyLast = &last
		}
	}
	base := AdapterBase(e.opts.ModelDir, e.opts.ModelName)
	c := checkpoint.Checkpoint{Config: e.adapters.AdapterConfig(base, e.model.Config.Family() == model.GPT2),
		Tensors: tensors, Optimizer: opt, State: state, Generation: gen}
	if err := checkpoint.Save(dir, c); err != nil {
		return fmt.Errorf("saving checkpoint: %w", err)
	}
	e.lastCkpt = dir
	if err := checkpoint.Prune(filepath.Join(e.runDir, "checkpoints"), e.cfg.SaveTotalLimit, dir); err != nil {
		e.logf("pruning checkpoints: %v", err)
	}
	ev := events.Event{Type: events.Checkpoint, Step: e.step, Path: dir}
	if rep, err := monitor.Analyze(dir, ""); err == nil {
		ev.Health = rep.Health()
	}
	e.emit(ev)
	return nil
}

// lockForResume takes runDir's lock and checks that it holds a checkpoint, before any long
// work: a folder another process is writing, or one with nothing to resume from, is refused
// at once. Leftovers of a save killed half way are removed (the lock makes that safe).
func (e *Engine) lockForResume(runDir string) error {
	if st, err := os.Stat(runDir); err != nil || !st.IsDir() {
		return fmt.Errorf("--resume %s: no such run folder", runDir)
	}
	lock, err := runlock.Acquire(runDir)
	if err != nil {
		return err
	}
	e.lock = lock
	dir := filepath.Join(runDir, "checkpoints")
	checkpoint.RemoveLeftovers(dir)
	atomicfile.RemoveLeftovers(runDir)
	list, err := checkpoint.List(dir)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return fmt.Errorf("%s: no checkpoint to resume from", runDir)
	}
	return nil
}

// abandon undoes a start that failed: the sinks are closed, the lock given back and a run
// folder made by this start removed, so that no stub run is left behind.
func (e *Engine) abandon() {
	if e.jsonlFile != nil {
		e.jsonlFile.Close()
		e.jsonlFile, e.jsonl = nil, nil
	}
	if e.tb != nil {
		e.tb.Close()
		e.tb = nil
	}
	if e.wb != nil {
		e.wb.Close()
		e.wb = nil
	}
	e.lock.Release()
	e.lock = nil
	e.closeDevice()
	if e.made != "" {
		os.RemoveAll(e.made)
		e.made = ""
	}
}

// checkState refuses a trainer state no run of this tool writes.
func checkState(s *checkpoint.TrainerState, o *checkpoint.Optimizer) error {
	switch {
	case s.GlobalStep < 1:
		return fmt.Errorf("global_step %d is not a step of a run", s.GlobalStep)
	case s.DataCursor < 0:
		return fmt.Errorf("data_cursor %d is negative", s.DataCursor)
	case o.Step < 0 || o.Step > s.GlobalStep:
		return fmt.Errorf("the optimizer's step %d does not fit global_step %d", o.Step, s.GlobalStep)
	case s.ScheduleSteps < 0 || s.WarmupSteps < 0:
		return fmt.Errorf("negative schedule (schedule_steps %d, warmup_steps %d)", s.ScheduleSteps, s.WarmupSteps)
	}
	return nil
}

// resume continues the run in runDir from its newest checkpoint that loads (an unreadable
// newer one, from a crash, is reported and skipped).
func (e *Engine) resume(runDir string) error {
	list, err := checkpoint.List(filepath.Join(runDir, "checkpoints"))
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return fmt.Errorf("%s: no checkpoint to resume from", runDir)
	}
	var c checkpoint.Checkpoint
	var path string
	for i := len(list) - 1; i >= 0; i-- {
		c, err = checkpoint.Load(list[i].Path)
		if err == nil && (c.Optimizer == nil || c.State == nil) {
			err = errors.New("no optimizer or trainer state")
		}
		if err == nil {
			if err = checkState(c.State, c.Optimizer); err == nil {
				path = list[i].Path
				break
			}
			err = fmt.Errorf("%s: %w", checkpoint.TrainerStateFile, err)
		}
		e.logf("skipping checkpoint %s: %v", list[i].Path, err)
	}
	if path == "" {
		return fmt.Errorf("%s: no checkpoint loads", runDir)
	}
	if err := e.adapters.Load(path, c.Tensors); err != nil {
		return err
	}
	for _, p := range e.params {
		m, v := c.Optimizer.ExpAvg[p.Name], c.Optimizer.ExpAvgSq[p.Name]
		if len(m) != p.M.Len() || len(v) != p.V.Len() {
			return fmt.Errorf("%s: optimizer state of %s missing or of another size", path, p.Name)
		}
		if err := e.model.Backend().Upload(p.M, m); err != nil {
			return fmt.Errorf("%s: optimizer state of %s: %w", path, p.Name, err)
		}
		if err := e.model.Backend().Upload(p.V, v); err != nil {
			return fmt.Errorf("%s: optimizer state of %s: %w", path, p.Name, err)
		}
	}
	e.opt.Step = c.Optimizer.Step
	e.step, e.cursor, e.tokensSeen = c.State.GlobalStep, c.State.DataCursor, c.State.NumInputTokensSeen
	if a := e.entropy; a != nil && c.State.EntropyCoef != nil { // the adaptive controller goes on where it was
		a.Coef, a.Last = *c.State.EntropyCoef, math.Inf(1)
		if c.State.EntropyLast != nil {
			a.Last = *c.State.EntropyLast
		}
	}
	if err := e.restoreGeneration(filepath.Join(path, checkpoint.GenerationFile), c.Generation); err != nil {
		return err
	}
	e.runDir, e.runName, e.lastCkpt = runDir, filepath.Base(runDir), path
	old, oldErr := config.Load(filepath.Join(runDir, "config.toml"))
	if h := e.cfg.Hash(); c.State.ConfigHash != "" && h != c.State.ConfigHash {
		if oldErr != nil {
			e.logf("the configuration differs from the one the checkpoint was made with (its config.toml does not load: %v); continuing with the new one", oldErr)
		} else if ch := e.cfg.Changes(old); len(ch) > 0 {
			e.logf("resuming with %s", strings.Join(ch, "; "))
		} else { // only keys this version adds, at their defaults, tell the two apart
			e.logf("resuming with the settings of its config.toml; keys added since take their defaults")
		}
	}
	e.keepSchedule(c.State, old)
	if e.step >= e.cfg.MaxSteps {
		return fmt.Errorf("%s: the run is already at step %d of max_steps %d (raise --steps to continue it)", runDir, e.step, e.cfg.MaxSteps)
	}
	if err := e.cfg.Write(filepath.Join(runDir, "config.toml")); err != nil {
		return err
	}
	if err := events.KeepThrough(filepath.Join(runDir, "events.jsonl"), e.step); err != nil {
		return err
	}
	e.logf("resuming %s from %s", runDir, path)
	return nil
}

// keepSchedule makes a resumed run follow the learning-rate schedule its checkpoint was
// trained under: its horizon and warm-up come from the trainer state (or, for checkpoints
// older than those fields, from the run's config.toml as it was), not from a --steps given
// now. Steps past the horizon keep the rate of its last step, so the rate never jumps.
func (e *Engine) keepSchedule(s *checkpoint.TrainerState, old *config.Config) {
	total, warmup := s.ScheduleSteps, s.WarmupSteps
	if total == 0 && old != nil {
		total, warmup = old.MaxSteps, old.WarmupStepsFor()
	}
	if total <= 0 {
		return
	}
	e.sched.Total, e.sched.Warmup, e.sched.Hold = total, warmup, true
	if e.cfg.MaxSteps > total {
		e.logf("steps %d–%d are past the learning-rate schedule's horizon of %d steps: the rate stays at %.3g, its value at step %d",
			total+1, e.cfg.MaxSteps, total, e.cfg.LearningRate*e.sched.Factor(total-1), total)
	}
}
