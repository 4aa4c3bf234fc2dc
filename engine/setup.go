package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/events"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/memory"
	"rlhfstation/engine/model"
	"rlhfstation/engine/monitor"
	"rlhfstation/engine/optim"
	"rlhfstation/engine/tensorboard"
	"rlhfstation/engine/wandb"
	"rlhfstation/internal/human"
	"rlhfstation/internal/runlock"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// eventBuffer is how many events may wait for the front end before the engine waits.
const eventBuffer = 256

// New prepares a run: it checks the memory estimate, loads and quantizes the model, attaches
// the adapters, reads the prompts, loads or computes the baselines, and creates (or, when
// resuming, reopens) the run folder. Nothing is written before every input has been read and
// checked.
func New(cfg *config.Config, opts Options) (_ *Engine, err error) {
	e := &Engine{cfg: cfg, opts: opts, out: make(chan events.Event, eventBuffer), ctrl: make(chan request, 16)}
	if opts.ModelDir == "" {
		return nil, errors.New("engine: no model folder")
	}
	// A failed start leaves nothing behind: the lock is given back and a run folder made
	// here is removed.
	defer func() {
		if err != nil {
			e.abandon()
		}
	}()
	if opts.Resume != "" {
		// Refused at once, before minutes of loading: a folder another process writes, or
		// one with nothing to resume from.
		if err := e.lockForResume(opts.Resume); err != nil {
			return nil, err
		}
	}
	dev, note, err := OpenDevice(cfg.Device)
	if err != nil {
		return nil, err
	}
	e.dev, e.device = dev, DeviceLabel(dev)
	if note != "" {
		e.logf("%s", note)
	}
	preset, err := presets.Load(cfg.Preset)
	if err != nil {
		return nil, err
	}
	preset = preset.WithCommands(cfg.Rewards).WithEnvironments(cfg.Environments)
	if len(cfg.RewardWeights) > 0 {
		if preset, err = preset.WithRewardWeights(cfg.RewardWeights); err != nil {
			return nil, err
		}
	}
	e.preset = preset
	// Every check that needs no model comes before the minutes of loading one.
	th, err := monitorThresholds(cfg)
	if err != nil {
		return nil, &ConfigError{err}
	}
	if cfg.InitAdapter != "" {
		if opts.Resume != "" {
			e.logf("init_adapter %s is not read when resuming: the weights come from the checkpoint", cfg.InitAdapter)
		} else {
			if e.init, err = readInitAdapter(cfg, cfg.InitAdapter, e.logf); err != nil {
				return nil, err
			}
			if err := e.init.checkBase(opts.ModelDir, e.logf); err != nil {
				return nil, err
			}
		}
	}

	mc, err := model.LoadConfig(opts.ModelDir)
	if err != nil {
		return nil, err
	}
	if err := checkContext(mc, cfg, opts.ModelDir); err != nil {
		return nil, err
	}
	if opts.Resume == "" {
		if err := checkOutput(cfg.OutputDir, checkpointEstimate(mc, cfg.LoRA.R)); err != nil {
			return nil, err
		}
	}
	e.prompts, err = e.loadPrompts()
	if err != nil {
		// A malformed or missing data file is bad input: exit 2, as the README promises.
		return nil, &ConfigError{err}
	}
	if err := e.setupEval(); err != nil {
		return nil, err
	}
	if err := checkMemory(opts.ModelDir, cfg, e.prompts); err != nil {
		return nil, err
	}
	// The garbage between collections as the estimate counts it, yielding near the memory there is.
	avail, _ := memory.Available()
	memory.Collect(avail)
	if steps := cfg.StepsFor(len(e.prompts)); steps != cfg.MaxSteps && opts.Resume == "" {
		e.logf("num_train_epochs = %g over %d prompts: max_steps = %d", cfg.NumTrainEpochs, len(e.prompts), steps)
		cfg.MaxSteps = steps
	}
	baseRead, err := e.readBaselines()
	if err != nil {
		return nil, err
	}

	t0 := time.Now()
	if e.model, e.tok, err = LoadModelQuantized(opts.ModelDir, cfg.Quant); err != nil {
		return nil, err
	}
	e.logf("loaded %s (%s parameters) in %s", opts.ModelName, human.Count(int64(e.model.NumParams())), time.Since(t0).Round(time.Millisecond))
	if note, err := genDefaultsNote(opts.ModelDir, cfg); err != nil {
		return nil, err
	} else if note != "" {
		e.logf("%s", note)
	}
	e.paramInfo = events.Params{Total: int64(e.model.NumParams()), ResidentBytes: int64(e.model.NumParams()) * 4}
	if err := e.quantizeBase(); err != nil {
		return nil, err
	}
	if e.init != nil {
		if err := e.init.targets(cfg, e.model, e.logf); err != nil {
			return nil, err
		}
	}
	// The model computes on the device from here: its weights go there on the first pass,
	// after the device said the run fits.
	if err := checkDeviceMemory(e.dev, e.model, cfg, longestPromptOf(e.tok, e.prompts, cfg.MaxPromptLength)); err != nil {
		return nil, err
	}
	if err := e.model.Use(e.dev); err != nil {
		return nil, err
	}
	if err := e.attachAdapters(); err != nil {
		return nil, err
	}
	e.paramInfo.Trainable = e.adapters.Count()
	e.reportTruncation()
	if err := checkPromptVocab(e.model, e.tok, e.prompts); err != nil {
		return nil, err
	}

	if e.preset.NTL != nil && (e.preset.NTL.Weight > 0 || e.preset.NTL.LossWeight > 0) {
		e.digits, err = rewards.FindDigitTokens(usableVocab(e.model, e.tok), e.tok.TokenBytes, e.tok.IsSpecial)
		if err != nil {
			return nil, fmt.Errorf("preset %s uses NTL: %w", e.preset.Name, err)
		}
	}
	if !baseRead {
		if err := e.computeBaselines(); err != nil {
			return nil, err
		}
	}
	e.funcs, err = e.preset.Funcs(e.base.Levels, e.digits)
	if err != nil {
		return nil, fmt.Errorf("preset %s: %w", e.preset.Name, err)
	}
	if err := e.startCommands(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.closeCommands()
			e.closeEnvironments()
		}
	}()
	if err := e.startEnvironments(); err != nil {
		return nil, err
	}
	e.entropy = newEntropyBonus(cfg)
	e.mon = monitor.New(th)
	e.stopOn = th.StopOn
	e.mon.Now = e.now
	e.mon.WarmupSteps = cfg.WarmupStepsFor()

	if e.opt, err = optim.NewAdamW(e.model.Backend(), e.params, cfg.AdamBeta1, cfg.AdamBeta2, cfg.AdamEpsilon, cfg.WeightDecay); err != nil {
		return nil, err
	}
	e.opt.AfterUpdate(e.model.AdaptersChanged) // the model's bf16 copies of the adapters
	k := cfg.LRSchedulerKwargs
	e.sched = optim.Schedule{Kind: cfg.LRSchedulerType, Warmup: cfg.WarmupStepsFor(), Total: cfg.MaxSteps, BaseLR: cfg.LearningRate,
		Args: optim.ScheduleArgs{NumCycles: k.NumCycles, MinLR: k.MinLR, MinLRRate: k.MinLRRate, LREnd: k.LREnd, Power: k.Power,
			NumDecaySteps: k.NumDecaySteps, NumStableSteps: k.NumStableSteps, DecayType: k.DecayType, MinLRRatio: k.MinLRRatio}}
	if err := e.sched.Validate(); err != nil {
		return nil, err
	}
	if opts.Resume != "" {
		if err := e.resume(opts.Resume); err != nil {
			return nil, err
		}
		e.mon.WarmupSteps = e.sched.Warmup
	} else if err := e.createRunFolder(); err != nil {
		return nil, err
	}
	if err := e.openSinks(); err != nil {
		return nil, err
	}
	if err := e.logCommands(); err != nil {
		return nil, err
	}
	return e, nil
}

// loadPrompts reads the data file, else takes the prompts given in Options, else the
// built-in prompts of the preset's domain.
func (e *Engine) loadPrompts() ([]data.Example, error) {
	if e.cfg.Data.Path == "" {
		if len(e.opts.Prompts) > 0 {
			out := slices.Clone(e.opts.Prompts)
			return out, e.applyChatTemplate(out)
		}
		return builtinPrompts(e.preset.Root, e.cfg.Seed)
	}
	d, err := data.Load(e.cfg.Data.Path, data.Options{PromptKey: e.cfg.Data.PromptKey, AnswerKey: e.cfg.Data.AnswerKey})
	if err != nil {
		return nil, err
	}
	e.logf("data: %s", d.Describe())
	if err := e.applyChatTemplate(d.Examples); err != nil {
		return nil, err
	}
	var out []data.Example
	for _, x := range d.Examples {
		if x.Prompt == "" {
			x.Prompt = x.Text
		}
		if x.Prompt != "" {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts in the file", e.cfg.Data.Path)
	}
	return out, nil
}

// applyChatTemplate renders the conversational prompts with the template [data] chat_template
// names (README "Chat templates"), saying in the run's first lines what it did. Plain-text
// prompts stay as they are, as TRL leaves them.
func (e *Engine) applyChatTemplate(ex []data.Example) error {
	setting := e.cfg.Data.ChatTemplate
	c, err := ChatTemplate(e.opts.ModelDir, setting, `set [data] chat_template = "FILE" (a .jinja file, or a tokenizer_config.json that has a chat_template)`)
	if err != nil {
		if setting != "auto" && setting != "none" {
			return fmt.Errorf("data.chat_template (%s): %w", e.cfg.Origin("data.chat_template"), err)
		}
		return err
	}
	c.Kwargs = e.cfg.Data.ChatTemplateKwargs
	n, err := c.Render(ex)
	if err != nil {
		return err
	}
	switch {
	case n > 0:
		kw := ""
		if len(c.Kwargs) > 0 {
			kw = fmt.Sprintf(", chat_template_kwargs %v", c.Kwargs)
		}
		e.logf("chat template: %s rendered %d conversational prompts (encoded without adding special tokens again%s)", c.Template.Source, n, kw)
		for _, x := range ex {
			if Conversational(x) {
				e.logf("chat template: the first prompt (%s) as the model sees it: %q", x.Where(), x.Prompt)
				break
			}
		}
	case c.Template != nil:
		e.logf("chat template: %s not applied: the prompts are plain text, used as they are (as TRL does); give them as lists of {role, content} messages to have the template applied", c.Template.Source)
	}
	return nil
}

// attachAdapters puts a LoRA adapter on every targeted linear.
func (e *Engine) attachAdapters() error {
	lc := lora.Config{R: e.cfg.LoRA.R, Alpha: e.cfg.LoRA.Alpha, Dropout: e.cfg.LoRA.Dropout,
		TargetModules: e.cfg.LoRA.TargetModules, RSLoRA: e.cfg.LoRA.UseRSLoRA}
	rng := e.stepRNG(0, 1)
	var layers []*lora.Layer
	for _, l := range e.model.Linears() {
		if !lora.Selects(lc.TargetModules, l.Name) {
			continue
		}
		ll, err := lora.NewLayer(e.model.Backend(), l.Name, l.In, l.Out, lc, rng)
		if err != nil {
			return err
		}
		if !e.cfg.LoRA.InitLoRAWeights {
			// PEFT's init_lora_weights = false keeps nn.Linear's own init for B too: the
			// adapted model then starts away from the base (for tests of adapters).
			if err := ll.RandomizeB(rng); err != nil {
				return err
			}
		}
		a := &adapter{layer: ll}
		l.Adapter = a
		layers = append(layers, ll)
		e.modules = append(e.modules, a)
		an, bn := lora.TensorNames(l.Name)
		e.params = append(e.params, &optim.Param{Name: an, Data: ll.A, Grad: ll.GradA},
			&optim.Param{Name: bn, Data: ll.B, Grad: ll.GradB})
	}
	if len(layers) == 0 {
		return fmt.Errorf("lora target_modules %v match no linear module of this model (modules are named like %s)",
			[]string(e.cfg.LoRA.TargetModules), e.model.Linears()[0].Name)
	}
	e.adapters = lora.NewSet(lc, layers)
	if e.init != nil {
		if err := e.adapters.Load("init_adapter "+e.init.dir, e.init.tensors); err != nil {
			return err
		}
		e.logf("starting from the adapter %s: %d modules, r %d, lora_alpha %g; a fresh optimizer", e.init.dir, len(layers), lc.R, lc.Alpha)
	}
	return nil
}

// readBaselines reads the baselines a run scores against when they come from a file: --baselines,
// else, on resume, the run's own baselines.json (so a resume scores as the run did, without
// recomputing them). It runs before the model loads: a foreign or unreadable file is refused
// at once.
func (e *Engine) readBaselines() (bool, error) {
	if e.preset.PPL == nil || e.preset.PPL.Weight == 0 {
		return false, nil
	}
	path := e.cfg.Baselines
	if path == "" && e.opts.Resume != "" {
		if p := filepath.Join(e.opts.Resume, "baselines.json"); fileExists(p) {
			path = p
		}
	}
	if path == "" {
		return false, nil
	}
	modelHash, tokHash, err := rewards.FolderHashes(e.opts.ModelDir)
	if err != nil {
		return false, err
	}
	b, err := rewards.LoadBaselines(path)
	if err != nil {
		return false, err
	}
	warn, err := b.Check(modelHash, tokHash, e.cfg.AcceptBaselines)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if warn != "" {
		e.logf("%s", warn)
	}
	if warn, err = b.CheckText(e.preset.PPL.Text, e.cfg.AcceptBaselines); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	} else if warn != "" {
		e.logf("%s", warn)
	}
	if path != e.cfg.Baselines {
		e.logf("baselines from the run's %s", path)
	}
	e.base = b
	return true, nil
}

// computeBaselines computes the baselines from the prompts' data when no file gave them; they
// are saved in the run folder later.
func (e *Engine) computeBaselines() error {
	if e.preset.PPL == nil || e.preset.PPL.Weight == 0 {
		return nil
	}
	modelHash, tokHash, err := rewards.FolderHashes(e.opts.ModelDir)
	if err != nil {
		return err
	}
	e.logf("computing perplexity baselines from %d reference texts", len(e.prompts))
	b, err := ComputeBaselines(e.model, e.tok, referenceTexts(e.prompts, e.preset.PPL.Text), BaselineOptions{Format: data.PromptJSONL, ChunkTokens: BaselineChunkTokens, MaxSamples: 512,
		Text: e.preset.PPL.Text,
		Progress: func(done, total int) {
			if done == total || done%64 == 0 {
				e.logf("baselines: %d/%d samples", done, total)
			}
		}})
	if errors.Is(err, ErrNoReasoning) {
		// Bare-number answers: scoring completions against the perplexity of single numbers
		// would reward anything wordy. The term is left out of r, and the run says so.
		ppl := *e.preset.PPL
		ppl.Inapplicable = "the data's answers hold no reasoning to make baselines of"
		e.preset.PPL = &ppl
		e.logf("perplexity (ppl) not applicable: %v; rewards/ppl is logged as not applicable and adds nothing to the reward (give worked solutions ending in `#### N`, or --baselines FILE)", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("computing baselines: %w", err)
	}
	b.ModelHash, b.TokenizerHash = modelHash, tokHash
	b.Created = time.Now().UTC().Truncate(time.Second)
	b.Source = "run prompts"
	if e.cfg.Data.Path != "" {
		b.Source = e.cfg.Data.Path
	}
	e.base = b
	return nil
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// reportTruncation says how many prompts are longer than a rollout keeps (their beginnings are
// cut, the BOS kept), counted over the first prompts so a large dataset costs little.
func (e *Engine) reportTruncation() {
	limit := promptRoom(&e.model.Config, e.cfg)
	if limit <= 0 {
		return
	}
	n, cut, longest := min(len(e.prompts), 4096), 0, 0
	for _, p := range e.prompts[:n] {
		if l := len(e.tok.Encode(p.Prompt, true).IDs); l > limit {
			cut++
			longest = max(longest, l)
		}
	}
	if cut > 0 {
		e.logf("%d of %d prompts checked are longer than %d tokens (max_prompt_length %d, context %d less max_completion_length %d); their beginnings are cut (longest: %d tokens)",
			cut, n, limit, e.cfg.MaxPromptLength, e.model.Config.Context(), e.cfg.MaxCompletionLength, longest)
	}
}

// referenceTexts are what the baselines are computed on: the reference answers where the data
// has them (scored after their prompt), else the prompts themselves; for a perplexity of the
// reasoning, the reference answers alone.
func referenceTexts(ex []data.Example, text rewards.PPLText) []data.Example {
	var out []data.Example
	for _, x := range ex {
		switch {
		case text == rewards.ReasoningText:
			// Only a reference answer can hold reasoning (ComputeBaselines keeps those that
			// do): neither a bare ground truth nor the prompt stands in for it.
			if x.Text != "" {
				out = append(out, data.Example{Prompt: x.Prompt, Messages: x.Messages, Text: x.Text})
			}
		case x.Text != "":
			out = append(out, data.Example{Prompt: x.Prompt, Messages: x.Messages, Text: x.Text})
		case x.Answer != "":
			out = append(out, data.Example{Prompt: x.Prompt, Messages: x.Messages, Text: x.Answer})
		case Conversational(x):
			out = append(out, data.Example{Prompt: x.Prompt, Messages: x.Messages})
		default:
			out = append(out, data.Example{Text: x.Prompt})
		}
	}
	return out
}

// ConfigError is a setting refused before any work (by ResolveRun, SelectDevice, CheckConfig
// and New): a bad usage, not a failed run. Front ends exit with 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// CheckConfig runs the checks of cfg that need no model: what a front end calls as soon as
// it has resolved a configuration. New runs them too.
func CheckConfig(cfg *config.Config) error {
	if _, err := monitorThresholds(cfg); err != nil {
		return &ConfigError{err}
	}
	return nil
}

func monitorThresholds(cfg *config.Config) (monitor.Thresholds, error) {
	th := monitor.DefaultThresholds()
	if len(cfg.Monitor) == 0 {
		return th, nil
	}
	// The [monitor] table arrives decoded; it is mapped onto the struct's toml names strictly,
	// and a problem is reported at the file and line that set the key.
	if key, err := decodeMonitor(cfg.Monitor, &th); err != nil {
		return th, fmt.Errorf("%s: [monitor] %w", cfg.Origin("monitor."+key), err)
	}
	if err := th.Validate(); err != nil {
		return th, fmt.Errorf("[monitor]: %w", err)
	}
	return th, nil
}

// createRunFolder makes runs/<yyyymmdd-hhmmss>-<preset>/ and writes the resolved config.
func (e *Engine) createRunFolder() error {
	name := e.cfg.RunName
	if name == "" {
		name = e.now().Format("20060102-150405") + "-" + e.preset.Name
	}
	dir := filepath.Join(e.cfg.OutputDir, name)
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("run folder %s exists already: pick another --out or run_name, or --resume it", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "checkpoints"), 0o755); err != nil {
		return err
	}
	e.made = dir
	lock, err := runlock.Acquire(dir)
	if err != nil {
		return err
	}
	e.lock = lock
	e.runDir, e.runName = dir, name
	if err := e.cfg.Write(filepath.Join(dir, "config.toml")); err != nil {
		return err
	}
	if e.preset.PPL != nil && e.preset.PPL.Weight > 0 && e.preset.PPL.Inapplicable == "" && e.cfg.Baselines == "" {
		if err := e.base.Save(filepath.Join(dir, "baselines.json")); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) openSinks() error {
	f, err := os.OpenFile(filepath.Join(e.runDir, "events.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	e.jsonlFile, e.jsonl = f, events.NewWriter(f)
	if e.tb, err = tensorboard.Create(filepath.Join(e.runDir, "tb")); err != nil {
		return err
	}
	if e.cfg.Reports("wandb") {
		e.wb, err = wandb.Create(e.runDir, wandb.Run{Name: e.runName, Config: e.cfg.Map(), Args: os.Args[1:]})
	}
	return err
}

func (e *Engine) emitRunStart() {
	params := e.paramInfo
	cfgMap := e.cfg.Map()
	if e.preset.PPL != nil {
		cfgMap["baselines"] = map[string]any{"word": e.base.Levels.Word, "phrase": e.base.Levels.Phrase, "sentence": e.base.Levels.Sentence}
	}
	e.emit(events.Event{Type: events.RunStart, Step: e.step, Run: e.runName, Model: e.opts.ModelName, Device: e.device,
		Preset: e.preset.Name, TotalSteps: e.cfg.MaxSteps, Params: &params, Config: cfgMap, Path: e.runDir})
}
