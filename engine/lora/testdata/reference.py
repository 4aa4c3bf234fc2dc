# Independent reference for engine/lora: PEFT's LoRA linear, y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ, in
# PyTorch, with gradients of sum(y ⊙ dy) by autograd.
import json
import sys

import torch

c = json.load(sys.stdin)
t = lambda v, shape: torch.tensor(v, dtype=torch.float64).reshape(shape).requires_grad_(True)
x = t(c["x"], (c["rows"], c["in"]))
w = torch.tensor(c["w"], dtype=torch.float64).reshape(c["out"], c["in"])
a = t(c["a"], (c["r"], c["in"]))
b = t(c["b"], (c["out"], c["r"]))
dy = torch.tensor(c["dy"], dtype=torch.float64).reshape(c["rows"], c["out"])
y = x @ w.T + c["scale"] * (x @ a.T) @ b.T
(y * dy).sum().backward()
json.dump({"y": y.flatten().tolist(), "dx": x.grad.flatten().tolist(),
           "da": a.grad.flatten().tolist(), "db": b.grad.flatten().tolist()}, sys.stdout)
