# Independent reference for engine/optim: torch.optim.AdamW, clip_grad_norm_ and the Hugging
# Face schedule formulas of transformers' get_scheduler (constant, constant_with_warmup, linear,
# cosine, cosine_with_min_lr, polynomial, warmup_stable_decay), over fixed gradients.
import json
import math
import sys

import torch

case = json.load(sys.stdin)
params = [torch.nn.Parameter(torch.tensor(p, dtype=torch.float32)) for p in case["params"]]
opt = torch.optim.AdamW(params, lr=case["lr"], betas=(case["beta1"], case["beta2"]),
                        eps=case["eps"], weight_decay=case["weight_decay"])
warm, total, kind = case["warmup"], case["total"], case["kind"]


kw = case["kwargs"]
lr0 = case["lr"]


def factor(step):
    if kind == "constant":
        return 1.0
    if kind == "warmup_stable_decay":
        decay = kw["num_decay_steps"]
        stable = total - warm - decay
        if step < warm:
            return step / max(1, warm)
        if step < warm + stable:
            return 1.0
        if step < warm + stable + decay:
            p = (step - warm - stable) / max(1, decay)
            v = 1 - p if kw["decay_type"] == "linear" else 0.5 * (1 + math.cos(math.pi * 2 * 0.5 * p))
            return (1 - kw["min_lr_ratio"]) * v + kw["min_lr_ratio"]
        return kw["min_lr_ratio"]
    if step < warm:
        return step / max(1, warm)
    progress = (step - warm) / max(1, total - warm)
    if kind == "linear":
        return max(0.0, (total - step) / max(1, total - warm))
    if kind == "cosine":
        return max(0.0, 0.5 * (1 + math.cos(math.pi * progress)))
    if kind == "cosine_with_min_lr":
        f = max(0.0, 0.5 * (1 + math.cos(math.pi * 2 * 0.5 * progress)))
        return f * (1 - kw["min_lr_rate"]) + kw["min_lr_rate"]
    if kind == "polynomial":
        end, power = kw["lr_end"], kw["power"]
        if step > total:
            return end / lr0
        remaining = 1 - (step - warm) / (total - warm)
        return ((lr0 - end) * remaining ** power + end) / lr0
    return 1.0


sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
norms = []
for grads in case["grads"]:
    for p, g in zip(params, grads):
        p.grad = torch.tensor(g, dtype=torch.float32)
    norms.append(float(torch.nn.utils.clip_grad_norm_(params, case["max_norm"])))
    opt.step()
    sched.step()
json.dump({"params": [p.detach().tolist() for p in params], "norms": norms}, sys.stdout)
