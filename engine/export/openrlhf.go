package export

import (
	"fmt"
	"math"
	"strings"
)

// openrlhf writes train.jsonl (the keys --data.input_key and --data.label_key name) and
// launch.sh: python3 -m openrlhf.cli.train_ppo_ray with the remote reward, the GRPO advantage
// estimator (group_norm), LoRA and 4-bit flags, nodes and GPUs as arguments.
func openrlhf(run Run, o Options, m *mapping) ([]file, error) {
	c := run.Cfg
	rows := promptRows(run)
	data, err := jsonl(rows)
	if err != nil {
		return nil, fmt.Errorf("export: train.jsonl: %w", err)
	}

	var flags [][]string // each: the flag, then its values
	flag := func(ours, name string, v any, note ...string) {
		f := []string{name}
		switch v := v.(type) {
		case nil: // a switch
		case []string:
			f = append(f, v...)
		case []float64:
			for _, x := range v {
				f = append(f, show(x))
			}
		default:
			f = append(f, show(v))
		}
		flags = append(flags, f)
		if ours != "" {
			shown := v
			if v == nil {
				shown = "on"
			}
			m.set(ours, name, shown, note...)
		}
	}
	flag("model", "--actor.model_name_or_path", run.Model)
	flag("data.path", "--data.prompt_dataset", "train.jsonl", fmt.Sprintf("%d prompts", len(rows)))
	flag("", "--data.input_key", "prompt")
	flag("", "--data.label_key", "answer")
	m.set("data.prompt_key,data.answer_key", "--data.input_key, --data.label_key", "prompt, answer", "the label reaches the reward server as labels")
	if run.ChatTemplate {
		flag("data.chat_template", "--data.apply_chat_template", nil, "prompts are chat turns rendered with the model's template")
	} else {
		m.set("data.chat_template", "(no --data.apply_chat_template)", c.Data.ChatTemplate, "the model has no chat template (or data.chat_template = none): plain prompts")
	}
	flag("preset", "--reward.remote_url", o.RewardURL, "serve-reward, started with this preset")
	flag("", "--algo.advantage.estimator", "group_norm")
	m.set("(GRPO)", "--algo.advantage.estimator", "group_norm", "group-relative advantages (OpenRLHF's name for GRPO's)")
	switch c.ScaleRewards {
	case "none":
		flag("scale_rewards", "--algo.advantage.no_std_norm", nil, "the mean is taken off, no division by the std")
	case "batch":
		m.unmapped("scale_rewards", c.ScaleRewards, "OpenRLHF 0.11.0 divides by the group's std or not at all; exported as group")
	default:
		m.set("scale_rewards", "(group_norm's std division)", c.ScaleRewards)
	}
	flag("num_generations", "--rollout.n_samples_per_prompt", c.NumGenerations)
	flag("temperature", "--rollout.temperature", c.Temperature)
	flag("top_p", "--rollout.top_p", c.TopP)
	if c.TopK != 0 {
		m.unmapped("top_k", c.TopK, "OpenRLHF 0.11.0 has no top-k sampling flag")
	} else {
		m.set("top_k", "(no top-k flag)", 0, "off, as OpenRLHF samples")
	}
	if c.MinP > 0 {
		m.unmapped("min_p", c.MinP, "OpenRLHF 0.11.0 has no min-p sampling flag")
	} else {
		m.set("min_p", "(no min-p flag)", 0, "off, as OpenRLHF samples")
	}
	if c.RepetitionPenalty != 1 {
		m.unmapped("repetition_penalty", c.RepetitionPenalty, "OpenRLHF 0.11.0 has no repetition-penalty flag")
	} else {
		m.set("repetition_penalty", "(no repetition-penalty flag)", 1, "off, as OpenRLHF samples")
	}
	flag("max_completion_length", "--rollout.max_new_tokens", c.MaxCompletionLength)
	flag("max_prompt_length,max_completion_length", "--data.max_len", c.MaxPromptLength+c.MaxCompletionLength, "prompt + response")
	batch := c.PerDeviceTrainBatchSize * c.GradientAccumulationSteps
	flag("per_device_train_batch_size,gradient_accumulation_steps", "--rollout.batch_size", batch, "prompts per step")
	flag("per_device_train_batch_size,gradient_accumulation_steps,num_generations", "--train.batch_size", batch*c.NumGenerations, "samples per optimizer step: one step per rollout")
	micro := c.PerDeviceTrainBatchSize * c.NumGenerations
	flag("", "--train.micro_batch_size", micro)
	flag("", "--rollout.micro_batch_size", micro)
	flag("max_steps", "--data.max_samples", c.MaxSteps*batch, "max_steps × prompts per step: OpenRLHF stops when the prompts run out")
	flag("", "--train.num_episodes", 1)
	flag("", "--train.max_epochs", c.NumIterations)
	m.set("num_iterations", "--train.max_epochs", c.NumIterations, "updates per rollout")
	flag("learning_rate", "--actor.adam.lr", c.LearningRate)
	flag("adam_beta1,adam_beta2", "--actor.adam.betas", []float64{c.AdamBeta1, c.AdamBeta2})
	flag("adam_epsilon", "--actor.adam.eps", c.AdamEpsilon)
	flag("weight_decay", "--actor.adam.weight_decay", c.WeightDecay)
	flag("max_grad_norm", "--actor.max_norm", c.MaxGradNorm)
	ratio := c.WarmupRatio
	if c.WarmupSteps > 0 {
		ratio = math.Min(1, float64(c.WarmupSteps)/float64(c.MaxSteps))
	}
	flag("warmup_steps,warmup_ratio", "--actor.lr_warmup_ratio", ratio)
	sched := map[string]string{"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}[c.LRSchedulerType]
	flag("lr_scheduler_type", "--actor.lr_scheduler", sched, "transformers' scheduler names")
	flag("epsilon,epsilon_high", "--actor.eps_clip_low_high", []float64{c.Epsilon, c.EpsilonHigh})
	switch {
	case c.ImportanceSamplingLevel == "sequence":
		flag("importance_sampling_level", "--actor.policy_loss_type", "gspo")
	default:
		flag("importance_sampling_level", "--actor.policy_loss_type", "ppo")
	}
	switch c.LossType {
	case "dapo", "bnpo":
		m.set("loss_type", "(token-mean)", c.LossType, "OpenRLHF averages the loss over the tokens")
	default:
		m.unmapped("loss_type", c.LossType, "OpenRLHF 0.11.0 averages the policy loss over tokens (dapo/bnpo) and has no flag for "+c.LossType+"'s aggregation or loss")
	}
	if c.Beta > 0 {
		flag("beta", "--algo.kl.use_loss", nil, "KL as a loss term, as TRL")
		flag("", "--algo.kl.estimator", "k3")
		m.set("(KL estimator)", "--algo.kl.estimator", "k3", "DESIGN §5's and TRL's estimator")
	}
	flag("beta", "--algo.kl.init_coef", c.Beta)
	if c.EntropyCoef > 0 {
		flag("entropy_coef", "--actor.entropy_coef", c.EntropyCoef)
	}
	if c.FilterGroups {
		flag("filter_groups", "--algo.dynamic_filtering_enable", nil, "keeps the groups whose mean reward lies inside the range")
		flag("", "--algo.dynamic_filtering_range", []float64{0, 1})
		m.set("filter_groups", "--algo.dynamic_filtering_range", "0 1", "for rewards in [0, 1], the groups whose rewards are not all equal")
	}
	flag("seed", "--train.seed", c.Seed)

	flag("lora.r", "--ds.lora.rank", c.LoRA.R)
	flag("lora.lora_alpha", "--ds.lora.alpha", intOr(c.LoRA.Alpha))
	flag("lora.lora_dropout", "--ds.lora.dropout", c.LoRA.Dropout)
	if c.LoRA.TargetModules.AllLinear() {
		m.set("lora.target_modules", "--ds.lora.target_modules", "all-linear", "its default, left out: given on the command line it would be read as a module name")
	} else {
		flag("lora.target_modules", "--ds.lora.target_modules", []string(c.LoRA.TargetModules))
	}
	m.unmapped("lora.use_rslora", c.LoRA.UseRSLoRA, "OpenRLHF 0.11.0 has no rsLoRA flag (scale alpha/r)")
	m.unmapped("lora.init_lora_weights", c.LoRA.InitLoRAWeights, "OpenRLHF initialises LoRA as PEFT's default")
	switch c.Quant.Type {
	case "nf4":
		flag("quant.type", "--ds.load_in_4bit", nil, "NF4 through bitsandbytes")
		if c.Quant.DoubleQuant {
			m.set("quant.double_quant", "(--ds.load_in_4bit)", true, "OpenRLHF loads 4-bit with double quantization, bf16 compute")
		} else {
			m.unmapped("quant.double_quant", false, "OpenRLHF's 4-bit loading always double-quantizes")
		}
		m.unmapped("quant.blocksize", c.Quant.BlockSize, "bitsandbytes quantizes in blocks of 64 (no setting)")
	case "fp4":
		m.unmapped("quant", c.Quant.Type, "OpenRLHF's --ds.load_in_4bit is NF4 only: FP4 is not exported")
	default:
		m.set("quant.type", "(no --ds.load_in_4bit)", "none", "a bf16 base")
	}
	flag("", "--ds.param_dtype", "bf16")
	flag("", "--ds.zero_stage", 2)
	flag("", "--actor.gradient_checkpointing_enable", nil)
	if run.Adapter != "" {
		m.unmapped("init_adapter", run.Adapter, "OpenRLHF 0.11.0 cannot start from a PEFT adapter: merge it first (rlhfstation merge --model MODEL --adapter ADAPTER --out DIR) and give DIR as --actor.model_name_or_path")
	} else {
		m.unmapped("init_adapter", "", "the run has no checkpoint: a fresh adapter")
	}
	m.unmapped("mask_truncated_completions", c.MaskTruncatedCompletions, "OpenRLHF 0.11.0 has no such flag")
	m.unmapped("top_entropy_quantile", c.TopEntropyQuantile, "OpenRLHF 0.11.0 has no entropy-quantile token mask")
	flag("save_steps", "--ckpt.save_steps", c.SaveSteps)
	if c.SaveTotalLimit > 0 {
		flag("save_total_limit", "--ckpt.max_num", c.SaveTotalLimit)
	}
	flag("", "--ckpt.output_dir", "out")
	flag("", "--ckpt.path", "out/ckpt")
	flag("logging_steps", "--logger.logging_steps", c.LoggingSteps)
	flag("report.to", "--logger.tensorboard_dir", "logs", "TensorBoard events, which `rlhfstation watch logs` reads")
	flag("", "--vllm.tensor_parallel_size", 1)
	flag("", "--vllm.gpu_memory_utilization", 0.5)
	flag("", "--train.colocate_all", nil)
	m.set("(nodes, GPUs)", "--actor.num_nodes, --actor.num_gpus_per_node, --ref.*, --vllm.num_engines", "launch.sh arguments", "actor, reference and vLLM engines share the GPUs")

	var sh strings.Builder
	fmt.Fprintf(&sh, `#!/bin/sh
# The rlhfstation run %q with OpenRLHF (targets %s), exported by rlhfstation export.
# usage: launch.sh [NNODES] [GPUS_PER_NODE]     (defaults 1 and 1; a Ray cluster must be up:
# ray start --head on the first node, ray start --address HEAD:6379 on the others)
# Start the rewards first:  rlhfstation serve-reward --preset %s --addr 0.0.0.0:5000
# Follow the run with: rlhfstation watch logs
set -eu
NNODES=${1:-1}
GPUS_PER_NODE=${2:-1}
cd "$(dirname "$0")"
exec python3 -m openrlhf.cli.train_ppo_ray \
`, run.Name, OpenRLHFVersion, c.Preset)
	for _, f := range flags {
		q := make([]string, len(f))
		for i, s := range f {
			q[i] = shellQuote(s)
		}
		fmt.Fprintf(&sh, "    %s \\\n", strings.Join(q, " "))
	}
	sh.WriteString(`    --actor.num_nodes "$NNODES" --actor.num_gpus_per_node "$GPUS_PER_NODE" \
    --ref.num_nodes "$NNODES" --ref.num_gpus_per_node "$GPUS_PER_NODE" \
    --vllm.num_engines "$((NNODES * GPUS_PER_NODE))"
`)
	return []file{
		{"train.jsonl", data, 0o644},
		{"launch.sh", []byte(sh.String()), 0o755},
	}, nil
}
