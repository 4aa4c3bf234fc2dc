package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// verl's dataset row (its examples/data_preprocess layout): the prompt as chat turns, the
// ground truth under reward_model, our plain-text prompt in extra_info for serve-reward's
// perplexity rewards.
type verlMessage struct {
	Content string `parquet:"content"`
	Role    string `parquet:"role"`
}

type verlReward struct {
	GroundTruth string `parquet:"ground_truth"`
	Style       string `parquet:"style"`
}

type verlExtra struct {
	Index  int64  `parquet:"index"`
	Split  string `parquet:"split"`
	Prompt string `parquet:"prompt"`
	Answer string `parquet:"answer"`
	// Columns are the dataset's other columns, as JSON ("" when none).
	Columns string `parquet:"columns"`
}

type verlRow struct {
	DataSource  string        `parquet:"data_source"`
	Prompt      []verlMessage `parquet:"prompt,list"`
	Ability     string        `parquet:"ability"`
	RewardModel verlReward    `parquet:"reward_model"`
	ExtraInfo   verlExtra     `parquet:"extra_info"`
}

// plainTemplate renders chat turns as their bare text: verl always applies a chat template, and
// a base model without one must see the prompt as it was trained.
const plainTemplate = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

func verl(run Run, o Options, m *mapping) ([]file, error) {
	c := run.Cfg
	rows := make([]verlRow, len(run.Examples))
	for i, x := range run.Examples {
		var msgs []verlMessage
		for _, t := range messages(x) {
			msgs = append(msgs, verlMessage{Content: t.Content, Role: t.Role})
		}
		cols := ""
		if len(x.Extra) > 0 {
			b, _ := json.Marshal(x.Extra)
			cols = string(b)
		}
		rows[i] = verlRow{DataSource: "rlhfstation/" + c.Preset, Prompt: msgs, Ability: c.Preset,
			RewardModel: verlReward{GroundTruth: x.Answer, Style: "rule"},
			ExtraInfo:   verlExtra{Index: int64(i), Split: "train", Prompt: text(x), Answer: x.Answer, Columns: cols}}
	}
	var pq bytes.Buffer
	// Version-1 data pages, plain encoding, Snappy: what every reader of verl's ecosystem
	// (pyarrow through datasets) and the smallest Parquet readers take.
	w := parquet.NewGenericWriter[verlRow](&pq, parquet.DataPageVersion(1), parquet.DefaultEncoding(&parquet.Plain),
		parquet.Compression(&parquet.Snappy))
	if _, err := w.Write(rows); err != nil {
		return nil, fmt.Errorf("export: train.parquet: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("export: train.parquet: %w", err)
	}

	var args []string
	set := func(ours, key string, v any, note ...string) {
		args = append(args, key+"="+hydra(v))
		if ours != "" {
			m.set(ours, key, v, note...)
		}
	}
	const (
		actor = "actor_rollout_ref.actor."
		model = "actor_rollout_ref.model."
		roll  = "actor_rollout_ref.rollout."
	)
	set("", "algorithm.adv_estimator", "grpo")
	m.set("(GRPO)", "algorithm.adv_estimator", "grpo", "group-relative advantages")
	set("model", model+"path", run.Model)
	if !run.ChatTemplate {
		set("data.chat_template", model+"custom_chat_template", plainTemplate, "the model has no chat template (or data.chat_template = none): prompts are fed as their plain text")
	} else {
		m.set("data.chat_template", "(the tokenizer's chat template)", c.Data.ChatTemplate, "verl renders the chat prompts with the model's template")
	}
	set("data.path", "data.train_files", "train.parquet", fmt.Sprintf("%d prompts", len(rows)))
	set("", "data.val_files", "train.parquet")
	set("max_prompt_length", "data.max_prompt_length", c.MaxPromptLength)
	set("max_completion_length", "data.max_response_length", c.MaxCompletionLength)
	set("", "data.filter_overlong_prompts", true)
	set("", "data.truncation", "left")
	batch := c.PerDeviceTrainBatchSize * c.GradientAccumulationSteps
	set("per_device_train_batch_size,gradient_accumulation_steps", "data.train_batch_size", batch, "prompts per step: per_device_train_batch_size × gradient_accumulation_steps")
	set("", actor+"ppo_mini_batch_size", batch)
	m.set("per_device_train_batch_size,gradient_accumulation_steps", actor+"ppo_mini_batch_size", batch, "one optimizer step per generation batch")
	micro := c.PerDeviceTrainBatchSize * c.NumGenerations
	set("", actor+"ppo_micro_batch_size_per_gpu", micro)
	set("", roll+"log_prob_micro_batch_size_per_gpu", micro)
	set("", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", micro)
	m.set("per_device_train_batch_size,num_generations", actor+"ppo_micro_batch_size_per_gpu, rollout/ref log_prob_micro_batch_size_per_gpu", micro, "completions per micro-batch")
	set("num_generations", roll+"n", c.NumGenerations)
	set("temperature", roll+"temperature", c.Temperature)
	set("top_p", roll+"top_p", c.TopP)
	topK := c.TopK
	if topK == 0 {
		topK = -1
	}
	set("top_k", roll+"top_k", topK, "0 (off) is -1 in vLLM")
	if c.RepetitionPenalty != 1 {
		m.unmapped("repetition_penalty", c.RepetitionPenalty, "verl 0.7.0's ppo_trainer.yaml has no rollout repetition_penalty")
	} else {
		m.set("repetition_penalty", "(no repetition_penalty)", 1, "off, as verl samples")
	}
	if c.MinP > 0 {
		m.unmapped("min_p", c.MinP, "verl's rollout config has no min_p")
	} else {
		m.set("min_p", "(no min_p)", 0, "off, as verl samples")
	}
	set("", roll+"name", "vllm")
	set("", roll+"tensor_model_parallel_size", 1)
	set("", roll+"gpu_memory_utilization", 0.6)
	set("", roll+"load_format", "safetensors")
	set("", roll+"layered_summon", true)
	m.set("(LoRA)", roll+"load_format", "safetensors", "vLLM loads the LoRA weights from safetensors")
	set("num_iterations", actor+"ppo_epochs", c.NumIterations)
	set("learning_rate", actor+"optim.lr", c.LearningRate)
	set("weight_decay", actor+"optim.weight_decay", c.WeightDecay)
	set("adam_beta1,adam_beta2", actor+"optim.betas", []float64{c.AdamBeta1, c.AdamBeta2})
	set("max_grad_norm", actor+"optim.clip_grad", c.MaxGradNorm)
	switch {
	case c.WarmupSteps > 0:
		set("warmup_steps", actor+"optim.lr_warmup_steps", c.WarmupSteps)
	default:
		set("warmup_ratio", actor+"optim.lr_warmup_steps_ratio", c.WarmupRatio)
	}
	switch c.LRSchedulerType {
	case "cosine":
		set("lr_scheduler_type", actor+"optim.lr_scheduler_type", "cosine")
	case "constant":
		set("lr_scheduler_type", actor+"optim.lr_scheduler_type", "constant", "verl's constant keeps the warm-up")
	default:
		m.unmapped("lr_scheduler_type", c.LRSchedulerType, "verl 0.7.0 schedules constant or cosine after the warm-up, not linear decay; exported as constant")
		args = append(args, actor+"optim.lr_scheduler_type=constant")
	}
	m.unmapped("adam_epsilon", c.AdamEpsilon, "verl 0.7.0's optimizer config has no eps key (AdamW's default 1e-8)")

	set("loss_type", actor+"loss_agg_mode", lossAgg(c.LossType), "grpo: seq-mean-token-mean; bnpo/dapo: token-mean; dr_grpo: seq-mean-token-sum-norm")
	if c.LossType == "dr_grpo" {
		set("max_completion_length", actor+"loss_scale_factor", c.MaxCompletionLength, "Dr. GRPO divides by max_completion_length")
	}
	mode := "vanilla"
	switch {
	case c.LossType == "cispo":
		mode = "cispo"
	case c.LossType == "sapo":
		mode = "sapo"
		set("sapo_temperature_pos", actor+"tau_pos", c.SAPOTemperaturePos)
		set("sapo_temperature_neg", actor+"tau_neg", c.SAPOTemperatureNeg)
	case c.ImportanceSamplingLevel == "sequence":
		mode = "gspo"
	case c.LossType == "luspo" || c.LossType == "vespo":
		m.unmapped("loss_type", c.LossType, "verl 0.7.0 has no "+c.LossType+" policy loss; exported as the clipped (vanilla) loss")
	}
	set("loss_type,importance_sampling_level", actor+"policy_loss.loss_mode", mode)
	set("epsilon", actor+"clip_ratio_low", c.Epsilon)
	set("epsilon_high", actor+"clip_ratio_high", c.EpsilonHigh)
	switch c.ScaleRewards {
	case "group":
		set("scale_rewards", "algorithm.norm_adv_by_std_in_grpo", true)
	case "none":
		set("scale_rewards", "algorithm.norm_adv_by_std_in_grpo", false)
	default:
		m.unmapped("scale_rewards", c.ScaleRewards, "verl 0.7.0 divides by the group's std or not at all, never the batch's; exported as group")
		args = append(args, "algorithm.norm_adv_by_std_in_grpo=true")
	}
	set("beta", actor+"use_kl_loss", c.Beta > 0, "KL as a loss term, as TRL")
	set("beta", actor+"kl_loss_coef", c.Beta)
	set("", actor+"kl_loss_type", "low_var_kl")
	m.set("(KL estimator)", actor+"kl_loss_type", "low_var_kl", "k3, the estimator of DESIGN §5 and TRL")
	set("", "algorithm.use_kl_in_reward", false)
	set("entropy_coef", actor+"entropy_coeff", c.EntropyCoef, "the entropy bonus")
	if c.UseAdaptiveEntropy {
		m.unmapped("use_adaptive_entropy", true, "verl 0.7.0 has no adaptive entropy coefficient: entropy_coef stays fixed")
	}
	if c.FilterGroups {
		m.unmapped("filter_groups", true, "dynamic sampling is verl's DAPO recipe (recipe/dapo), not main_ppo's configuration")
	}
	set("seed", "data.seed", c.Seed)
	set("seed", actor+"data_loader_seed", c.Seed)

	set("lora.r", model+"lora_rank", c.LoRA.R)
	set("lora.lora_alpha", model+"lora_alpha", intOr(c.LoRA.Alpha))
	if c.LoRA.TargetModules.AllLinear() {
		set("lora.target_modules", model+"target_modules", "all-linear")
	} else {
		set("lora.target_modules", model+"target_modules", []string(c.LoRA.TargetModules))
	}
	m.unmapped("lora.lora_dropout", c.LoRA.Dropout, "verl 0.7.0's model config has no LoRA dropout (none is applied)")
	m.unmapped("lora.use_rslora", c.LoRA.UseRSLoRA, "verl 0.7.0's model config has no rsLoRA switch (scale alpha/r)")
	m.unmapped("lora.init_lora_weights", c.LoRA.InitLoRAWeights, "verl initialises LoRA as PEFT's default")
	if run.Adapter != "" {
		set("init_adapter", model+"lora_adapter_path", run.Adapter, "the adapter to start from")
	} else {
		m.unmapped("init_adapter", "", "the run has no checkpoint: a fresh adapter")
	}
	m.unmapped("quant", c.Quant.Type, "verl 0.7.0's FSDP actor trains over a bf16 base: no 4-bit (QLoRA) base; the LoRA settings carry over")
	m.unmapped("mask_truncated_completions", c.MaskTruncatedCompletions, "verl 0.7.0 has no such switch")
	m.unmapped("top_entropy_quantile", c.TopEntropyQuantile, "verl 0.7.0 has no entropy-quantile token mask")

	set("max_steps", "trainer.total_training_steps", c.MaxSteps)
	set("save_steps", "trainer.save_freq", c.SaveSteps)
	if c.SaveTotalLimit > 0 {
		set("save_total_limit", "trainer.max_actor_ckpt_to_keep", c.SaveTotalLimit)
	}
	set("", "trainer.project_name", "rlhfstation")
	set("run_name", "trainer.experiment_name", run.Name)
	set("report.to", "trainer.logger", []string{"console", "file"}, "the file logger writes metrics.jsonl, which `rlhfstation watch` reads")
	set("", "trainer.val_before_train", false)
	set("", "trainer.test_freq", -1)
	set("preset", "custom_reward_function.path", "reward.py", "compute_score asks serve-reward, started with this preset")
	set("", "custom_reward_function.name", "compute_score")

	var sh strings.Builder
	fmt.Fprintf(&sh, `#!/bin/sh
# The rlhfstation run %q as a verl job (targets %s), exported by rlhfstation export.
# usage: launch.sh [NNODES] [GPUS_PER_NODE]     (defaults 1 and 1)
# Start the rewards first, on a machine every node reaches (then set RLHFSTATION_REWARD_URL):
#   rlhfstation serve-reward --preset %s --addr 0.0.0.0:5000
# Follow the run with: rlhfstation watch metrics.jsonl
set -eu
NNODES=${1:-1}
GPUS_PER_NODE=${2:-1}
cd "$(dirname "$0")"
export RLHFSTATION_REWARD_URL="${RLHFSTATION_REWARD_URL:-%s}"
export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$PWD/metrics.jsonl}"
exec python3 -m verl.trainer.main_ppo \
`, run.Name, VerlVersion, c.Preset, o.RewardURL)
	for _, a := range args {
		fmt.Fprintf(&sh, "    %s \\\n", shellQuote(a))
	}
	sh.WriteString("    trainer.nnodes=\"$NNODES\" \\\n    trainer.n_gpus_per_node=\"$GPUS_PER_NODE\"\n")
	m.set("(nodes, GPUs)", "trainer.nnodes, trainer.n_gpus_per_node", "launch.sh arguments")

	return []file{
		{"train.parquet", pq.Bytes(), 0o644},
		{"reward.py", []byte(verlRewardFile(o.RewardURL)), 0o644},
		{"launch.sh", []byte(sh.String()), 0o755},
	}, nil
}

// hydra writes a value as a Hydra override value.
func hydra(v any) string {
	switch v := v.(type) {
	case bool:
		if v {
			return "true"
		}
		return "false"
	case float64:
		return show(v)
	case []float64:
		parts := make([]string, len(v))
		for i, f := range v {
			parts[i] = show(f)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case []string:
		return "[" + strings.Join(v, ",") + "]"
	case string:
		if strings.ContainsAny(v, "{}[]=,' \"%") {
			b, _ := json.Marshal(v) // a quoted Hydra string
			return "'" + strings.ReplaceAll(string(b[1:len(b)-1]), "'", `\'`) + "'"
		}
		return v
	}
	return fmt.Sprint(v)
}

// intOr is f as an int when it is whole (LoRA alpha is an integer in verl and OpenRLHF).
func intOr(f float64) any {
	if f == float64(int64(f)) {
		return int64(f)
	}
	return f
}

// verlRewardFile is the custom_reward_function file: verl calls compute_score per response.
func verlRewardFile(url string) string {
	return `"""verl's custom reward function for an rlhfstation export: each response is scored by
rlhfstation serve-reward (POST /get_reward, OpenRLHF's remote reward shape). Set
RLHFSTATION_REWARD_URL to the server's /get_reward (launch.sh sets it)."""
import json
import os
import time
import urllib.request

URL = os.environ.get("RLHFSTATION_REWARD_URL", ` + pyString(url) + `)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    prompt = (extra_info or {}).get("prompt") or ""
    body = json.dumps({"query": [prompt + solution_str], "prompts": [prompt],
                       "labels": ["" if ground_truth is None else str(ground_truth)]}).encode("utf-8")
    for attempt in range(5):
        try:
            request = urllib.request.Request(URL, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=180) as response:
                return float(json.loads(response.read())["rewards"][0])
        except OSError:
            if attempt == 4:
                raise
            time.sleep(1.0)
`
}
