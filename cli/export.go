package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"rlhfstation/engine"
	"rlhfstation/engine/config"
	"rlhfstation/engine/export"
	"rlhfstation/engine/runs"
)

func init() {
	register(command{name: "export", summary: "the same run on verl, TRL or OpenRLHF: data, launch, rewards, adapter, a mapping table", order: 87, run: runExport})
}

const exportUsage = `export --to verl|trl|openrlhf (RUN_DIR | --config run.toml) --out DIR [--reward-url URL] [--json]

Writes a run's setup for a distributed engine into DIR: the prompts in the engine's layout
(verl: train.parquet; TRL and OpenRLHF: train.jsonl), launch.sh [NNODES] [GPUS_PER_NODE]
(verl's main_ppo Hydra overrides, a TRL GRPOTrainer script train_grpo.py under accelerate,
OpenRLHF's train_ppo_ray flags), rewards asked of ` + "`rlhfstation serve-reward`" + ` (verl:
reward.py's compute_score), the adapter to start from (RUN_DIR's newest checkpoint), and
mapping.md: our key, theirs and the value, then every key with no equivalent and why; the
table is printed too. A RUN_DIR is read from its config.toml; --config resolves a run
configuration as --batch does. Targets: ` + export.VerlVersion + `; ` + export.TRLVersion + `; ` + export.OpenRLHFVersion + `.`

func runExport(s streams, args []string) error {
	fs := newFlagSet("export", exportUsage, s.stderr)
	to := fs.String("to", "", "the engine: verl, trl or openrlhf")
	out := fs.String("out", "", "folder to write (created)")
	url := fs.String("reward-url", export.DefaultRewardURL, "serve-reward's /get_reward `URL` as the engine's nodes reach it")
	asJSON := fs.Bool("json", false, "print one JSON document (what was written and the mapping) instead of the table")
	cfgPath := fs.String("config", "", "run configuration `FILE` (TOML), resolved as --batch does")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *to == "":
		return usagef("export: --to verl|trl|openrlhf is required")
	case *out == "":
		return usagef("export: --out DIR is required")
	case len(rest) > 1:
		return usagef("export takes one RUN_DIR (got %q)", rest)
	case len(rest) == 1 && *cfgPath != "":
		return usagef("export: give a RUN_DIR or --config, not both")
	case len(rest) == 0 && *cfgPath == "":
		return usagef("export: give a RUN_DIR or --config FILE")
	}
	known := false
	for _, e := range export.Engines {
		known = known || e == *to
	}
	if !known {
		return usagef("export: --to %q: want one of %s", *to, strings.Join(export.Engines, ", "))
	}
	run, err := exportRun(rest, *cfgPath, s.stderr)
	if err != nil {
		return err
	}
	res, err := export.Write(*run, export.Options{To: *to, Out: *out, RewardURL: *url})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(s.stdout, true, res)
	}
	fmt.Fprint(s.stdout, export.Table(res))
	fmt.Fprintf(s.stdout, "\nwrote %s in %s (targets %s)\nstart the rewards:  rlhfstation serve-reward --preset %s --addr 0.0.0.0:5000\nthen:              %s [NNODES] [GPUS_PER_NODE]\n",
		strings.Join(res.Files, ", "), res.Out, res.Version, run.Cfg.Preset, res.Launch)
	return nil
}

// exportRun gathers what is exported: the configuration, model, adapter and prompts.
func exportRun(rest []string, cfgPath string, stderr io.Writer) (*export.Run, error) {
	run := &export.Run{}
	if len(rest) == 1 {
		dir := rest[0]
		c, err := config.Load(filepath.Join(dir, "config.toml"))
		if err != nil {
			if os.IsNotExist(err) {
				return nil, usagef("%s: not a run folder (no config.toml)", dir)
			}
			return nil, usageError{err.Error()}
		}
		run.Cfg, run.Name = c, filepath.Base(absPath(dir))
		cps, err := runs.Checkpoints(dir)
		if err != nil {
			return nil, err
		}
		if len(cps) > 0 {
			run.Adapter = absPath(cps[len(cps)-1].Path)
		}
	} else {
		fs := flag.NewFlagSet("export", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		flags := config.Bind(fs)
		if err := fs.Parse([]string{"--config", cfgPath}); err != nil {
			return nil, usageError{err.Error()}
		}
		c, _, err := engine.ResolveRun(flags)
		if err != nil {
			return nil, err
		}
		run.Cfg = c
		run.Name = c.RunName
		if run.Name == "" {
			run.Name = strings.TrimSuffix(filepath.Base(cfgPath), filepath.Ext(cfgPath))
		}
	}
	if run.Adapter == "" && run.Cfg.InitAdapter != "" {
		run.Adapter = absPath(run.Cfg.InitAdapter)
	}
	model, err := engine.ModelDir(run.Cfg.Model)
	if err != nil {
		return nil, err
	}
	run.Model = absPath(model)
	tmpl, err := engine.ChatTemplate(model, run.Cfg.Data.ChatTemplate, "")
	run.ChatTemplate = err == nil && tmpl.Template != nil
	if !run.ChatTemplate {
		fmt.Fprintf(stderr, "export: prompts written as plain text: %s\n", strings.TrimSuffix(tmpl.Why, ": "))
	}
	if run.Examples, err = engine.RunPrompts(run.Cfg); err != nil {
		return nil, err
	}
	return run, nil
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
