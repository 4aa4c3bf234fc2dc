# Independent reference for engine/optim: torch.optim.AdamW, clip_grad_norm_ and the Hugging
# Face schedule formulas (warm-up, then constant / linear / cosine), over fixed gradients.
import json
import math
import sys

import torch

case = json.load(sys.stdin)
params = [torch.nn.Parameter(torch.tensor(p, dtype=torch.float32)) for p in case["params"]]
opt = torch.optim.AdamW(params, lr=case["lr"], betas=(case["beta1"], case["beta2"]),
                        eps=case["eps"], weight_decay=case["weight_decay"])
warm, total, kind = case["warmup"], case["total"], case["kind"]


def factor(step):
    if step < warm:
        return step / max(1, warm)
    if kind == "linear":
        return max(0.0, (total - step) / max(1, total - warm))
    if kind == "cosine":
        progress = (step - warm) / max(1, total - warm)
        return max(0.0, 0.5 * (1 + math.cos(math.pi * progress)))
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
