"""One GRPO step and decoding with PyTorch + transformers + peft on a CUDA GPU: the comparison
for the CUDA backend's figures in bench/gpu.sh (see README.md beside this file).

A Qwen2.5-0.5B-shaped model with random weights in bf16 (vocab 151936, dim 896, 24 layers, 14
heads, 2 KV heads, MLP 4864, tied head), peft LoRA r 16, alpha 32 on every linear but the head
(peft keeps the adapter weights in float32 over a bf16 base), the same step as
bench/grpo_step.py and the Go benchmark:

  rollout   model.generate: sampling at temperature 1, top-k 0, top-p 1, exactly --new tokens
            (no stop token), adapters on;
  scoring   a forward over prompt + completion with the adapters off (reference log-probs);
  loss      forward with autograd, log_softmax in float32, entropy, DESIGN §5's loss (dapo,
            beta 0.04, epsilon 0.2, group advantages of a reward = share of even token ids),
            backward into LoRA only;
  update    clip_grad_norm_(1.0) and torch.optim.AdamW (fused when available).

  python3 bench/gpu_step.py [--prompts 1] [--generations 8] [--prompt-len 32] [--new 64] [--steps 3]

prints one JSON document: seconds per phase (mean of the timed steps), the step's seconds and
tokens/s, peak GPU memory (torch.cuda.max_memory_allocated), and decode tokens/s of
model.generate for the batch (--decode-new tokens each) and for one sequence.
"""
import argparse
import json
import time

import torch
import transformers
import peft

QWEN05 = dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
              num_key_value_heads=2, intermediate_size=4864, tie_word_embeddings=True,
              max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6)


def token_logps(logits, seqs):
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    chosen = lp.gather(2, seqs[:, 1:, None])[..., 0]
    with torch.no_grad():
        ent = -(lp.exp() * lp).sum(-1)
    return chosen, ent


def sync_time():
    torch.cuda.synchronize()
    return time.perf_counter()


def step(model, opt, prompts, new, G, beta=0.04, eps=0.2):
    B, P = prompts.shape
    t0 = sync_time()
    with torch.no_grad():
        seqs = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                              temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new, min_new_tokens=new,
                              pad_token_id=0, eos_token_id=None)
    t1 = sync_time()
    with torch.no_grad(), model.disable_adapter():
        ref, _ = token_logps(model(seqs).logits, seqs)
    ref = ref[:, P - 1:]
    t2 = sync_time()
    comp = seqs[:, P:]
    rewards = (comp % 2 == 0).float().mean(1).view(-1, G)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).reshape(-1, 1)
    opt.zero_grad(set_to_none=False)
    logp, ent = token_logps(model(seqs).logits, seqs)
    logp = logp[:, P - 1:]
    ratio = torch.exp(logp - logp.detach())
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)
    d = ref - logp
    per_token = per_token + beta * (torch.exp(d) - d - 1)
    loss = per_token.sum() / per_token.numel()
    loss.backward()
    t3 = sync_time()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    t4 = sync_time()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


def decode_rate(model, prompts, new):
    with torch.no_grad():
        model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True, temperature=1.0,
                       top_k=0, top_p=1.0, max_new_tokens=4, min_new_tokens=4, pad_token_id=0, eos_token_id=None)
        t0 = sync_time()
        model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True, temperature=1.0,
                       top_k=0, top_p=1.0, max_new_tokens=new, min_new_tokens=new, pad_token_id=0, eos_token_id=None)
        t1 = sync_time()
    return prompts.shape[0] * new / (t1 - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=1)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--decode-new", type=int, default=128)
    ap.add_argument("--attn", default="sdpa", help="transformers attn_implementation (sdpa, eager, flash_attention_2)")
    args = ap.parse_args()
    torch.manual_seed(1)
    cfg = transformers.Qwen2Config(**QWEN05)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation=args.attn).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    lcfg = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lcfg)
    lora = [p for p in model.parameters() if p.requires_grad]
    try:
        opt = torch.optim.AdamW(lora, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(lora, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    G = args.generations
    base = torch.randint(0, cfg.vocab_size, (args.prompts, args.prompt_len), device="cuda")
    prompts = base.repeat_interleave(G, dim=0)
    for _ in range(args.warmup):
        step(model, opt, prompts, args.new, G)
    torch.cuda.reset_peak_memory_stats()
    times = [step(model, opt, prompts, args.new, G) for _ in range(args.steps)]
    peak = torch.cuda.max_memory_allocated()
    phases = [sum(t[i] for t in times) / len(times) for i in range(4)]
    total = sum(phases)
    tokens = prompts.shape[0] * (args.prompt_len + args.new)
    print(json.dumps({
        "model": "qwen2.5-0.5b-shaped, random, bf16", "params": n_params, "lora_params": sum(p.numel() for p in lora),
        "lora_dtype": str(lora[0].dtype), "torch": torch.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__, "device": torch.cuda.get_device_name(), "attn": args.attn,
        "batch": prompts.shape[0], "prompt_len": args.prompt_len, "new": args.new, "steps": args.steps, "tokens": tokens,
        "rollout_s": phases[0], "scoring_s": phases[1], "loss_backward_s": phases[2], "update_s": phases[3],
        "step_s": total, "tokens_per_s": tokens / total, "peak_gpu_bytes": peak,
        "decode_tokens_per_s": decode_rate(model, prompts, args.decode_new),
        "decode1_tokens_per_s": decode_rate(model, prompts[:1], args.decode_new),
    }))


if __name__ == "__main__":
    main()
