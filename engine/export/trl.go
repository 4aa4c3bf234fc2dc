package export

import (
	"fmt"
	"sort"
	"strings"

	"rlhfstation/engine/data"
)

// trl writes train.jsonl (a conversational prompt, or plain text for a model with no chat
// template, the answer and the other columns), train_grpo.py (GRPOConfig, GRPOTrainer, PEFT's
// LoraConfig, a 4-bit BitsAndBytesConfig, a reward function asking serve-reward) and launch.sh
// (accelerate launch over nodes and GPUs).
func trl(run Run, o Options, m *mapping) ([]file, error) {
	c := run.Cfg
	rows := promptRows(run)
	data, err := jsonl(rows)
	if err != nil {
		return nil, fmt.Errorf("export: train.jsonl: %w", err)
	}
	if run.ChatTemplate {
		m.set("data.path", "train.jsonl: prompt (conversational), answer", fmt.Sprintf("%d prompts", len(rows)), "the answer and the other columns reach the reward function as keyword arguments")
		m.set("data.chat_template", "(the tokenizer's chat template)", c.Data.ChatTemplate, "TRL renders conversational prompts with the model's template")
	} else {
		m.set("data.path", "train.jsonl: prompt (plain text), answer", fmt.Sprintf("%d prompts", len(rows)), "the model has no chat template (or data.chat_template = none): standard prompts")
		m.set("data.chat_template", "(plain-text prompts)", c.Data.ChatTemplate, "no template renders them")
	}

	var kw []string // GRPOConfig keyword arguments
	arg := func(ours, name, py string, v any, note ...string) {
		kw = append(kw, name+"="+py)
		if ours != "" {
			m.set(ours, "GRPOConfig."+name, v, note...)
		}
	}
	num := func(ours, name string, v any, note ...string) {
		switch v := v.(type) {
		case float64:
			arg(ours, name, pyFloat(v), v, note...)
		case bool:
			arg(ours, name, map[bool]string{true: "True", false: "False"}[v], v, note...)
		default:
			arg(ours, name, fmt.Sprint(v), v, note...)
		}
	}
	arg("output_dir", "output_dir", `os.path.join(HERE, "out")`, "out", "checkpoints and TensorBoard logs: `rlhfstation watch out` follows the run")
	arg("run_name", "run_name", pyString(run.Name), run.Name)
	num("learning_rate", "learning_rate", c.LearningRate)
	num("beta", "beta", c.Beta)
	num("epsilon", "epsilon", c.Epsilon)
	num("epsilon_high", "epsilon_high", c.EpsilonHigh)
	num("num_generations", "num_generations", c.NumGenerations)
	num("max_completion_length", "max_completion_length", c.MaxCompletionLength)
	num("temperature", "temperature", c.Temperature)
	num("top_p", "top_p", c.TopP)
	num("top_k", "top_k", c.TopK)
	if c.MinP > 0 {
		num("min_p", "min_p", c.MinP)
	}
	num("repetition_penalty", "repetition_penalty", c.RepetitionPenalty)
	num("num_iterations", "num_iterations", c.NumIterations)
	if c.StepsPerGeneration > 0 {
		num("steps_per_generation", "steps_per_generation", c.StepsPerGeneration)
	}
	arg("scale_rewards", "scale_rewards", pyString(c.ScaleRewards), c.ScaleRewards)
	arg("loss_type", "loss_type", pyString(c.LossType), c.LossType)
	arg("importance_sampling_level", "importance_sampling_level", pyString(c.ImportanceSamplingLevel), c.ImportanceSamplingLevel)
	num("mask_truncated_completions", "mask_truncated_completions", c.MaskTruncatedCompletions)
	num("top_entropy_quantile", "top_entropy_quantile", c.TopEntropyQuantile)
	num("sapo_temperature_neg", "sapo_temperature_neg", c.SAPOTemperatureNeg)
	num("sapo_temperature_pos", "sapo_temperature_pos", c.SAPOTemperaturePos)
	num("vespo_k_pos", "vespo_k_pos", c.VESPOKPos)
	num("vespo_lambda_pos", "vespo_lambda_pos", c.VESPOLambdaPos)
	num("vespo_k_neg", "vespo_k_neg", c.VESPOKNeg)
	num("vespo_lambda_neg", "vespo_lambda_neg", c.VESPOLambdaNeg)
	if c.Delta > 0 {
		num("delta", "delta", c.Delta)
	}
	num("entropy_coef", "entropy_coef", c.EntropyCoef)
	num("use_adaptive_entropy", "use_adaptive_entropy", c.UseAdaptiveEntropy)
	num("entropy_target", "entropy_target", c.EntropyTarget)
	num("entropy_coef_min", "entropy_coef_min", c.EntropyCoefMin)
	num("entropy_coef_max", "entropy_coef_max", c.EntropyCoefMax)
	num("entropy_coef_delta", "entropy_coef_delta", c.EntropyCoefDelta)
	if c.OffPolicyMaskThreshold > 0 {
		num("off_policy_mask_threshold", "off_policy_mask_threshold", c.OffPolicyMaskThreshold)
	}
	m.unmapped("multi_objective_aggregation", c.MultiObjectiveAggregation, "serve-reward returns one combined reward: nothing to aggregate")
	if c.FilterGroups {
		m.unmapped("filter_groups", true, "TRL 1.9.0 has no dynamic sampling")
	}
	m.unmapped("reward_weights", c.RewardWeights, "the preset's weights apply inside serve-reward, which returns one combined reward")
	m.unmapped("max_prompt_length", c.MaxPromptLength, "TRL 1.9.0's GRPOConfig has no max_prompt_length: prompts are not truncated")
	num("per_device_train_batch_size,num_generations", "per_device_train_batch_size", c.PerDeviceTrainBatchSize*c.NumGenerations,
		"TRL counts completions per device: our prompts × num_generations")
	num("gradient_accumulation_steps", "gradient_accumulation_steps", c.GradientAccumulationSteps)
	num("max_steps", "max_steps", c.MaxSteps)
	num("logging_steps", "logging_steps", c.LoggingSteps)
	num("save_steps", "save_steps", c.SaveSteps)
	if c.SaveTotalLimit > 0 {
		num("save_total_limit", "save_total_limit", c.SaveTotalLimit)
	}
	num("seed", "seed", c.Seed)
	arg("lr_scheduler_type", "lr_scheduler_type", pyString(c.LRSchedulerType), c.LRSchedulerType)
	if c.WarmupSteps > 0 {
		num("warmup_steps", "warmup_steps", c.WarmupSteps)
	} else {
		num("warmup_ratio", "warmup_steps", c.WarmupRatio, "transformers 5 reads a warmup_steps below 1 as a ratio (warmup_ratio is deprecated)")
	}
	num("weight_decay", "weight_decay", c.WeightDecay)
	num("adam_beta1", "adam_beta1", c.AdamBeta1)
	num("adam_beta2", "adam_beta2", c.AdamBeta2)
	num("adam_epsilon", "adam_epsilon", c.AdamEpsilon)
	num("max_grad_norm", "max_grad_norm", c.MaxGradNorm)
	num("", "bf16", true)
	num("", "gradient_checkpointing", true)
	report := []string{"tensorboard"}
	if c.Reports("wandb") {
		report = append(report, "wandb")
	}
	arg("report.to", "report_to", pyList(report), report, "TensorBoard events in out/runs, which `rlhfstation watch out` reads")
	if len(c.Data.ChatTemplateKwargs) > 0 {
		arg("data.chat_template_kwargs", "chat_template_kwargs", pyValue(c.Data.ChatTemplateKwargs), c.Data.ChatTemplateKwargs)
	}

	var lora []string
	l := c.LoRA
	lora = append(lora, fmt.Sprintf("r=%d", l.R), "lora_alpha="+pyNumber(l.Alpha), "lora_dropout="+pyFloat(l.Dropout))
	m.set("lora.r", "LoraConfig.r", l.R)
	m.set("lora.lora_alpha", "LoraConfig.lora_alpha", l.Alpha)
	m.set("lora.lora_dropout", "LoraConfig.lora_dropout", l.Dropout)
	if l.TargetModules.AllLinear() {
		lora = append(lora, `target_modules="all-linear"`)
	} else {
		lora = append(lora, "target_modules="+pyList(l.TargetModules))
	}
	m.set("lora.target_modules", "LoraConfig.target_modules", l.TargetModules)
	lora = append(lora, "use_rslora="+pyBool(l.UseRSLoRA), "init_lora_weights="+pyBool(l.InitLoRAWeights), `task_type="CAUSAL_LM"`)
	m.set("lora.use_rslora", "LoraConfig.use_rslora", l.UseRSLoRA)
	m.set("lora.init_lora_weights", "LoraConfig.init_lora_weights", l.InitLoRAWeights)

	quant := "None"
	if c.Quant.Type != "none" {
		quant = fmt.Sprintf("BitsAndBytesConfig(\n        load_in_4bit=True,\n        bnb_4bit_quant_type=%s,\n        bnb_4bit_use_double_quant=%s,\n        bnb_4bit_compute_dtype=torch.bfloat16,\n    )",
			pyString(c.Quant.Type), pyBool(c.Quant.DoubleQuant))
		m.set("quant.type", "BitsAndBytesConfig.load_in_4bit, bnb_4bit_quant_type", c.Quant.Type)
		m.set("quant.double_quant", "BitsAndBytesConfig.bnb_4bit_use_double_quant", c.Quant.DoubleQuant)
		m.unmapped("quant.blocksize", c.Quant.BlockSize, "bitsandbytes quantizes in blocks of 64 (no setting)")
	} else {
		m.set("quant.type", "(no quantization_config)", "none", "a bf16 base")
	}
	adapter := "None"
	if run.Adapter != "" {
		adapter = pyString(run.Adapter)
		m.set("init_adapter", "PeftModel.from_pretrained(..., is_trainable=True)", run.Adapter, "the adapter to start from; its own LoRA settings then apply")
	} else {
		m.unmapped("init_adapter", "", "the run has no checkpoint: a fresh adapter")
	}
	m.set("model", "AutoModelForCausalLM.from_pretrained", run.Model)
	m.set("preset", "reward_funcs=[rlhfstation_reward]", c.Preset, "each batch is scored by serve-reward, started with this preset")
	m.set("(nodes, GPUs)", "accelerate launch --num_machines, --num_processes", "launch.sh arguments")

	script := fmt.Sprintf(`"""The rlhfstation run %s as a TRL GRPO script (targets %s),
exported by rlhfstation export.

Start the rewards first:  rlhfstation serve-reward --preset %s --addr 127.0.0.1:5000
Run:                      ./launch.sh [NNODES] [GPUS_PER_NODE]   (accelerate launch train_grpo.py)
Follow:                   rlhfstation watch out
"""
import json
import os
import time
import urllib.request

import torch
from datasets import load_dataset
from peft import LoraConfig, PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from trl import GRPOConfig, GRPOTrainer

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = %s
ADAPTER = %s  # the adapter to start from (a PEFT folder), or None
REWARD_URL = os.environ.get("RLHFSTATION_REWARD_URL", %s)


def _text(x):
    """A prompt or completion as text: plain, or the contents of its chat turns."""
    if isinstance(x, str):
        return x
    return "".join(turn["content"] for turn in x)


def rlhfstation_reward(prompts, completions, answer=None, **kwargs):
    """The preset's reward r = sum_f w_f r_f of each completion, from rlhfstation serve-reward."""
    texts = [_text(p) for p in prompts]
    labels = ["" if a is None else str(a) for a in (answer or [None] * len(prompts))]
    body = json.dumps({"query": [p + _text(c) for p, c in zip(texts, completions)],
                       "prompts": texts, "labels": labels}).encode("utf-8")
    for attempt in range(5):
        try:
            request = urllib.request.Request(REWARD_URL, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600) as response:
                return [float(r) for r in json.loads(response.read())["rewards"]]
        except OSError:
            if attempt == 4:
                raise
            time.sleep(1.0)


def main():
    quantization = %s
    model = AutoModelForCausalLM.from_pretrained(MODEL, quantization_config=quantization, dtype=torch.bfloat16)
    peft_config = LoraConfig(
        %s,
    )
    if ADAPTER:
        model = PeftModel.from_pretrained(model, ADAPTER, is_trainable=True)
        peft_config = None
    args = GRPOConfig(
        %s,
    )
    dataset = load_dataset("json", data_files=os.path.join(HERE, "train.jsonl"), split="train")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[rlhfstation_reward],
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(MODEL),
        peft_config=peft_config,
    )
    trainer.train()


if __name__ == "__main__":
    main()
`, run.Name, TRLVersion, c.Preset, pyString(run.Model), adapter, pyString(o.RewardURL), quant,
		strings.Join(lora, ",\n        "), strings.Join(kw, ",\n        "))

	sh := fmt.Sprintf(`#!/bin/sh
# The rlhfstation run %q with TRL (targets %s), exported by rlhfstation export.
# usage: launch.sh [NNODES] [GPUS_PER_NODE]     (defaults 1 and 1; on each node set MACHINE_RANK,
# and MAIN_PROCESS_IP to the first node's address)
# Start the rewards first:  rlhfstation serve-reward --preset %s --addr 0.0.0.0:5000
set -eu
NNODES=${1:-1}
GPUS_PER_NODE=${2:-1}
cd "$(dirname "$0")"
export RLHFSTATION_REWARD_URL="${RLHFSTATION_REWARD_URL:-%s}"
exec accelerate launch --num_machines "$NNODES" --num_processes "$((NNODES * GPUS_PER_NODE))" \
    --machine_rank "${MACHINE_RANK:-0}" --main_process_ip "${MAIN_PROCESS_IP:-127.0.0.1}" \
    --main_process_port "${MAIN_PROCESS_PORT:-29500}" train_grpo.py
`, run.Name, TRLVersion, c.Preset, o.RewardURL)
	return []file{
		{"train.jsonl", data, 0o644},
		{"train_grpo.py", []byte(script), 0o644},
		{"launch.sh", []byte(sh), 0o755},
	}, nil
}

// turns are an example's prompt as [{role, content}] (data.Message has no JSON names).
func turns(x data.Example) []map[string]string {
	var out []map[string]string
	for _, t := range messages(x) {
		out = append(out, map[string]string{"role": t.Role, "content": t.Content})
	}
	return out
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// pyNumber writes a whole float as an int (LoRA alpha), else as a float.
func pyNumber(f float64) string {
	if f == float64(int64(f)) {
		return fmt.Sprint(int64(f))
	}
	return pyFloat(f)
}

func pyList(s []string) string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = pyString(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// pyValue writes a decoded TOML value (strings, numbers, booleans, lists, tables) as Python.
func pyValue(v any) string {
	switch v := v.(type) {
	case string:
		return pyString(v)
	case bool:
		return pyBool(v)
	case float64:
		return pyFloat(v)
	case int64:
		return fmt.Sprint(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = pyValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyString(k) + ": " + pyValue(v[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return pyString(fmt.Sprint(v))
}
