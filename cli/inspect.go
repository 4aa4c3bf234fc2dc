package cli

import (
	"rlhfstation/engine/monitor"
)

func init() {
	register(command{name: "inspect", summary: "checkpoint health: LoRA norms, drift against a reference, optimizer state", order: 20, run: runInspect})
}

// runInspect runs `rlhfstation inspect CKPT [--ref CKPT] [--json] [--top N]`.
//
// The readable report is a summary line with the health score, the issues with their
// recommendations, and a table per module group (attention, mlp, other) with the worst modules
// first. With --json it prints one JSON document, monitor.Report:
//
//	path, reference       the checkpoint folders
//	score                 health in [0, 1]: Π over issues of (1 − penalty), penalties
//	                      info 0.02, warning 0.15, critical 0.5 (one issue per code)
//	step, step_from       training step and where it was read ("trainer_state", "optimizer")
//	adapter               peft_type, base_model, r, lora_alpha, use_rslora, scale, scale_rule,
//	                      target_modules, modules, params, other_tensors
//	norms                 norm_a, norm_b, norm_ba ({mean, std, max, max_module} over modules of
//	                      ‖A‖_F, ‖B‖_F, ‖s·B·A‖_F), non_finite, zero_b
//	issues[]              code, severity (info|warning|critical), message, recommendation, modules
//	groups[]              name (attention|mlp|other), kinds[] ({kind, modules, norm_a, norm_b,
//	                      norm_ba, delta_ba}), modules[] worst first: {name, group, kind, layer,
//	                      r, in, out, scale, norm_a, norm_b, norm_ba, non_finite, issues, drift}
//	                      with drift = {delta_a, delta_b, ref_norm_ba, rel_change, delta_ba, frozen}
//	layers[]              layer (-1: outside numbered layers), modules, norm_ba, delta_ba
//	drift                 with --ref: compared, frozen, delta_a, delta_b, delta_ba, rel_change, ref_step
//	optimizer             when optimizer.safetensors is there: step, learning_rate, beta1, beta2,
//	                      eps, weight_decay, metadata, tensors, exp_avg_norm, exp_avg_sq_max,
//	                      non_finite, negative_exp_avg_sq
//	trainer_state         when trainer_state.json is there: global_step, learning_rate,
//	                      data_cursor, epoch, rng_state, config_hash, metrics; for the Hugging
//	                      Face Trainer's (TRL, Unsloth: source "transformers") also max_steps and
//	                      log_entries, with metrics and learning_rate from its last training log
//	skipped               files not read: PyTorch pickles (optimizer.pt, scheduler.pt,
//	                      rng_state.pth, training_args.bin)
//	foreign               set for another tool's checkpoint (checkpoint-N of the Trainer)
//
// Every number is finite (norms count the finite entries; non_finite counts the rest).
func runInspect(s streams, args []string) error {
	fs := newFlagSet("inspect", "inspect CKPT [--ref CKPT] [--json] [--top N]\n\n"+
		"CKPT is a folder holding a LoRA adapter in PEFT's layout: a checkpoint of this tool\n"+
		"(checkpoints/step-N), a TRL / Hugging Face Trainer checkpoint-N, or a bare adapter folder.", s.stderr)
	ref := fs.String("ref", "", "reference checkpoint `CKPT` to measure drift against (an earlier step of the run)")
	asJSON := fs.Bool("json", false, "print one JSON document (monitor.Report) instead of the report")
	top := fs.Int("top", 10, "module rows per group in the report, worst first (0: all)")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("inspect takes one checkpoint folder (got %d arguments); usage: rlhfstation inspect CKPT [--ref CKPT] [--json]", len(rest))
	}
	if *top < 0 {
		return usagef("--top must be 0 (all) or more, got %d", *top)
	}
	rep, err := monitor.Analyze(rest[0], *ref)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(s.stdout, true, rep)
	}
	return rep.WriteText(s.stdout, *top, "--top 0 shows all")
}
