package engine

import (
	"errors"
	"fmt"
	"path/filepath"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/events"
	"rlhfstation/engine/model"
	"rlhfstation/engine/monitor"
)

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
	opt := &checkpoint.Optimizer{Step: e.opt.Step, LearningRate: e.cfg.LearningRate * e.sched.Factor(max(e.step-1, 0)),
		Beta1: e.opt.Beta1, Beta2: e.opt.Beta2, Eps: e.opt.Eps, WeightDecay: e.opt.WeightDecay,
		ExpAvg: map[string][]float32{}, ExpAvgSq: map[string][]float32{}}
	for _, p := range e.params {
		opt.ExpAvg[p.Name], opt.ExpAvgSq[p.Name] = p.M, p.V
	}
	state := &checkpoint.TrainerState{GlobalStep: e.step, LearningRate: opt.LearningRate, DataCursor: e.cursor,
		Epoch: e.cursor / max(len(e.prompts), 1), RNGState: fmt.Sprintf("pcg seed=%d stream=step<<16|k", e.cfg.Seed),
		ConfigHash: e.cfg.Hash(), Metrics: e.lastStep}
	base := e.opts.ModelName
	c := checkpoint.Checkpoint{Config: e.adapters.AdapterConfig(base, e.model.Config.Family() == model.GPT2),
		Tensors: e.adapters.Tensors(), Optimizer: opt, State: state}
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
		if err == nil && c.Optimizer != nil && c.State != nil {
			path = list[i].Path
			break
		}
		if err == nil {
			err = errors.New("no optimizer or trainer state")
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
		if len(m) != len(p.M) || len(v) != len(p.V) {
			return fmt.Errorf("%s: optimizer state of %s missing or of another size", path, p.Name)
		}
		copy(p.M, m)
		copy(p.V, v)
	}
	e.opt.Step = c.Optimizer.Step
	e.step, e.cursor = c.State.GlobalStep, c.State.DataCursor
	e.runDir, e.runName, e.lastCkpt = runDir, filepath.Base(runDir), path
	if h := e.cfg.Hash(); c.State.ConfigHash != "" && h != c.State.ConfigHash {
		e.logf("the configuration differs from the one the checkpoint was made with; continuing with the new one (written to %s)", filepath.Join(runDir, "config.toml"))
	}
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
