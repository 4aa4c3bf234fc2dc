# Independent reference for engine/grpo: DESIGN §5's GRPO loss written directly in PyTorch,
# with the gradient taken by autograd. Reads a JSON case on stdin, prints a JSON result.
import json
import sys

import torch


def advantages(rewards, g, scale):
    r = torch.tensor(rewards, dtype=torch.float64)
    grouped = r.view(-1, g)
    mean = grouped.mean(dim=1).repeat_interleave(g)
    std = grouped.std(dim=1).repeat_interleave(g)
    a = r - mean
    if scale == "group":
        a = a / (std + 1e-4)
    elif scale == "batch":
        a = a / (r.std() + 1e-4)
    zero = torch.isclose(grouped.std(dim=1), torch.zeros(grouped.shape[0], dtype=torch.float64))
    return a.tolist(), zero.double().mean().item()


def loss(case):
    p = case["params"]
    seqs = case["seqs"]
    n = len(seqs)
    width = max(len(s["logp"]) for s in seqs)
    logp = torch.zeros(n, width, dtype=torch.float64)
    ref = torch.zeros(n, width, dtype=torch.float64)
    old = torch.zeros(n, width, dtype=torch.float64)
    mask = torch.zeros(n, width, dtype=torch.float64)
    adv = torch.tensor([s["adv"] for s in seqs], dtype=torch.float64).unsqueeze(1)
    has_old = any(s.get("old") is not None for s in seqs)
    for i, s in enumerate(seqs):
        k = len(s["logp"])
        logp[i, :k] = torch.tensor(s["logp"], dtype=torch.float64)
        ref[i, :k] = torch.tensor(s["ref"], dtype=torch.float64)
        if s.get("old") is not None:
            old[i, :k] = torch.tensor(s["old"], dtype=torch.float64)
        mask[i, :k] = 1
    logp.requires_grad_(True)
    old_lp = old if has_old else logp.detach()
    ratio = torch.exp(logp - old_lp)
    clipped = torch.clamp(ratio, 1 - p["epsilon"], 1 + p["epsilon_high"])
    per_token = -torch.min(ratio * adv, clipped * adv)
    kl = torch.exp(ref - logp) - (ref - logp) - 1
    if p["beta"] != 0:
        per_token = per_token + p["beta"] * kl
    lt = p["loss_type"]
    if lt == "grpo":
        total = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    elif lt == "bnpo":
        total = (per_token * mask).sum() / mask.sum().clamp(min=1)
    elif lt == "dr_grpo":
        total = (per_token * mask).sum() / (n * p["max_completion_length"])
    else:  # dapo: normalised by the tokens of the whole accumulated batch
        total = (per_token * mask).sum() / (p.get("tokens") or mask.sum().item())
    total.backward()
    low = ((ratio < 1 - p["epsilon"]) & (adv < 0)).double()
    high = ((ratio > 1 + p["epsilon_high"]) & (adv > 0)).double()
    region = ((low + high) > 0).double()
    count = mask.sum()
    grads = [logp.grad[i, : len(s["logp"])].tolist() for i, s in enumerate(seqs)]
    return {
        "loss": total.item(),
        "grad": grads,
        "kl": ((kl * mask).sum() / count).item(),
        "clip_low": ((low * mask).sum() / count).item(),
        "clip_high": ((high * mask).sum() / count).item(),
        "clip_region": ((region * mask).sum() / count).item(),
    }


def main():
    cases = json.load(sys.stdin)
    out = []
    for c in cases:
        if c["kind"] == "adv":
            a, frac = advantages(c["rewards"], c["g"], c["scale"])
            out.append({"adv": a, "frac": frac})
        else:
            out.append(loss(c))
    json.dump(out, sys.stdout)


main()
