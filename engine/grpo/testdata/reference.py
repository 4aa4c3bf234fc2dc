# Independent reference for engine/grpo: DESIGN §5's GRPO loss with every TRL option, written
# directly in PyTorch on padded tensors as TRL's GRPOTrainer forms it, with the gradient taken by
# autograd. Reads a JSON case on stdin, prints a JSON result.
import json
import math
import sys

import torch

DT = torch.float64


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


def nanstd(x, dim=None, keepdim=False):
    """Bessel-corrected standard deviation over the values that are not NaN."""
    if dim is None:
        v = x[~torch.isnan(x)]
        return v.std()
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    n = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = torch.nansum((x - mean) ** 2, dim=dim, keepdim=True) / (n - 1)
    out = var.sqrt()
    return out if keepdim else out.squeeze(dim)


def gdpo(by_func, weights, g):
    """multi_objective_aggregation = normalize_then_sum: each function normalised within its
    group, weighted nan-sum, then (r - nanmean) / (nanstd + 1e-4) over the batch; rows no function
    scored get advantage 0."""
    r = torch.tensor([[float("nan") if v is None else v for v in row] for row in by_func], dtype=DT).T  # [N, F]
    unscorable = torch.isnan(r).all(dim=1)
    grouped = r.view(-1, g, r.shape[1])
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, r.shape[1])
    rewards = (reward_k * torch.tensor(weights, dtype=DT).unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = float("nan")
    adv = (rewards - torch.nanmean(rewards)) / (nanstd(rewards) + 1e-4)
    return torch.nan_to_num(adv, nan=0.0).tolist()


def filter_groups(rounds, g, want, max_rounds):
    """Dynamic sampling as verl's filter_groups: each round's groups (uids) whose reward std
    (numpy's, NaN left out) is above 0, or that hold one trajectory, are kept; rounds are drawn
    while fewer than `want` groups are kept and fewer than max_rounds rounds were drawn (0: no
    limit); the batch is the first `want` kept groups. Short of them after max_rounds, verl
    raises; rlhfstation fills with the dropped groups in the order drawn (its documented rule)."""
    import numpy as np
    kept, dropped, used = [], [], 0
    for k, rewards in enumerate(rounds):
        used += 1
        r = np.array([np.nan if v is None else v for v in rewards], dtype=np.float64).reshape(-1, g)
        for j, grp in enumerate(r):
            with np.errstate(all="ignore"):
                std = np.nanstd(grp) if not np.isnan(grp).all() else np.nan
            (kept if (std > 0 or len(grp) == 1) else dropped).append([k, j])
        if len(kept) >= want or (max_rounds > 0 and used >= max_rounds):
            break
    selected = kept[:want] + dropped[:max(0, want - len(kept))]
    return {"selected": selected, "rounds": used}


def adaptive_entropy(p, entropies):
    """TRL 1.9's adaptive entropy coefficient (use_adaptive_entropy) over a run's steps: each
    step's loss applies the coefficient only while the previous step's entropy is at most the
    target (no bonus on the first step: the last entropy starts at +inf); after the step the
    coefficient moves by delta, up when the step's entropy is at most the target, else down,
    kept within [min, max]."""
    coef, last = p["entropy_coef"], float("inf")
    applied, coefs = [], []
    for h in entropies:
        applied.append(coef if last <= p["entropy_target"] else 0.0)
        if h <= p["entropy_target"]:
            coef = min(coef + p["entropy_coef_delta"], p["entropy_coef_max"])
        else:
            coef = max(coef - p["entropy_coef_delta"], p["entropy_coef_min"])
        last = h
        coefs.append(coef)
    return {"applied": applied, "coefs": coefs}


def loss(case):
    """The loss of one micro-batch as TRL's GRPOTrainer._compute_loss forms it, on padded
    [B, T] tensors with a completion mask, written from its definitions; autograd gives the
    gradient with respect to the per-token log-probs."""
    p = case["params"]
    seqs = case["seqs"]
    n = len(seqs)
    width = max(len(s["logp"]) for s in seqs)
    pad = lambda key: torch.stack([
        torch.cat([torch.tensor(s[key], dtype=DT), torch.zeros(width - len(s[key]), dtype=DT)])
        for s in seqs])
    logp = pad("logp").requires_grad_(True)
    ref = pad("ref")
    mask = torch.stack([torch.cat([torch.ones(len(s["logp"]), dtype=DT), torch.zeros(width - len(s["logp"]), dtype=DT)])
                        for s in seqs])
    if any(s.get("mask") is not None for s in seqs):  # the environment's tokens (tool_mask)
        tool = torch.stack([torch.cat([torch.tensor([1.0 if m else 0.0 for m in (s.get("mask") or [True] * len(s["logp"]))], dtype=DT),
                                       torch.zeros(width - len(s["logp"]), dtype=DT)]) for s in seqs])
        mask = mask * tool
    if p.get("mask_truncated"):
        truncated = torch.tensor([bool(s.get("truncated")) for s in seqs])
        mask = mask * (~truncated).to(DT).unsqueeze(1)
    adv = torch.tensor([s["adv"] for s in seqs], dtype=DT).unsqueeze(1)
    has_old = any(s.get("old") is not None for s in seqs)
    old = pad("old") if has_old else logp.detach()
    has_ent = all(s.get("entropy") is not None for s in seqs)
    ent = pad("entropy") if has_ent else None
    coef = p.get("entropy_coef") or 0.0
    if coef != 0:
        ent = ent.clone().requires_grad_(True)

    rho = p.get("top_entropy_quantile", 1.0)
    entropy_mask = None
    if rho < 1.0:
        active = ent[mask.bool()]
        if active.numel() == 0:
            entropy_mask = torch.zeros_like(mask, dtype=torch.bool)
        else:
            thr = torch.quantile(active, 1 - rho)
            entropy_mask = ((ent * mask) >= thr) & mask.bool()

    thr_off = p.get("off_policy_mask_threshold") or 0.0
    off_mask = None
    if thr_off > 0:  # DeepSeek-V3.2's off-policy sequence mask, as TRL's get_off_policy_mask
        seq_kl = ((old - logp.detach()) * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1.0)
        off_mask = ((adv >= 0) | (seq_kl <= thr_off)).to(DT)
    log_ratio = logp - old
    level = p.get("importance_sampling_level") or "token"
    if level == "token":
        log_w = log_ratio
    else:
        log_w = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_w)
    kl = torch.exp(ref - logp) - (ref - logp) - 1

    lt = p["loss_type"]
    eps, eps_high = p["epsilon"], p["epsilon_high"]
    phi = None
    if lt == "cispo":
        per_token = -torch.clamp(coef_1, max=eps_high).detach() * adv * logp
    elif lt in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        coef_2 = torch.clamp(coef_1, 1 - eps, 1 + eps_high)
        c1 = coef_1
        if p.get("delta"):  # two-sided clipping
            c1 = torch.clamp(coef_1, max=p["delta"])
        per_token = -torch.min(c1 * adv, coef_2 * adv)
    elif lt == "sapo":
        tau = torch.where(adv > 0, torch.tensor(p["sapo_temperature_pos"], dtype=DT),
                          torch.tensor(p["sapo_temperature_neg"], dtype=DT))
        per_token = -torch.sigmoid(tau * (coef_1 - 1)) * 4 / tau * adv
    elif lt == "vespo":
        with torch.no_grad():
            s = torch.sum(torch.clamp(log_ratio, -20.0, 20.0) * mask, dim=-1, keepdim=True)
            log_ws = torch.clamp(s, math.log(1e-8), 20.0)
            nonneg = adv >= 0
            k = torch.where(nonneg, torch.tensor(p["vespo_k_pos"], dtype=DT), torch.tensor(p["vespo_k_neg"], dtype=DT))
            lam = torch.where(nonneg, torch.tensor(p["vespo_lambda_pos"], dtype=DT),
                              torch.tensor(p["vespo_lambda_neg"], dtype=DT)).clamp(min=1e-4)
            phi = torch.exp(lam + k * log_ws - lam * torch.exp(log_ws)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        per_token = -phi * adv * logp
    else:
        raise ValueError(lt)
    per_token = per_token.expand(n, width)
    if off_mask is not None:
        per_token = per_token * off_mask
    if entropy_mask is not None:
        per_token = per_token * entropy_mask
    if p["beta"] != 0:
        per_token = per_token + p["beta"] * kl

    if lt in ("grpo", "sapo"):
        total = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif lt == "bnpo":
        total = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    elif lt == "dr_grpo":
        total = (per_token * mask).sum() / (n * p["max_completion_length"])
    elif lt in ("dapo", "cispo", "vespo"):  # by the loss tokens of the whole accumulated batch
        tokens = p.get("tokens") or mask.sum().item()
        total = (per_token * mask).sum() / max(tokens, 1)
    else:  # luspo: each sequence's loss times its length, averaged over the sequences
        total = (per_token * mask).sum(-1).mean()
    if coef != 0:  # the entropy bonus over the loss tokens the entropy filter keeps
        eff = mask if entropy_mask is None else mask * entropy_mask
        if lt in ("dapo", "cispo", "vespo"):
            tokens = p.get("tokens") or mask.sum().item()
            total = total - coef * (ent * eff).sum() / max(tokens, 1)
        else:
            total = total - coef * (ent * eff).sum() / eff.sum().clamp(min=1.0)
    total.backward()

    def masked_mean(x):  # per token over the mask, or per sequence over all sequences
        if x.shape[1] == 1:
            return (x.sum() / max(x.shape[0], 1)).item()
        return ((x * mask).sum() / mask.sum().clamp(min=1.0)).item()

    def seq_means(x):  # each sequence's share (NaN for a sequence without loss tokens)
        if x.shape[1] == 1:
            return x.squeeze(1)
        return (x * mask).sum(-1) / mask.sum(-1)

    out = {
        "loss": total.item(),
        "grad": [logp.grad[i, : len(s["logp"])].tolist() for i, s in enumerate(seqs)],
        "metrics": {"kl": masked_mean(kl)},
    }
    if coef != 0:
        out["entropy_grad"] = [ent.grad[i, : len(s["logp"])].tolist() for i, s in enumerate(seqs)]
    m = out["metrics"]
    if off_mask is not None:
        m["off_policy_mask/dropped_ratio"] = (1 - off_mask).mean().item()
    if has_ent:
        m["entropy"] = masked_mean(ent.detach())
    if lt in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        low = ((coef_1 < 1 - eps) & (adv < 0)).to(DT)
        high = ((coef_1 > 1 + eps_high) & (adv > 0)).to(DT)
        region = ((low + high) > 0).to(DT)
        m["clip_ratio/low_mean"] = masked_mean(low)
        m["clip_ratio/high_mean"] = masked_mean(high)
        m["clip_ratio/region_mean"] = masked_mean(region)
        lows, highs = seq_means(low), seq_means(high)
        m["clip_ratio/low_min"] = lows[~torch.isnan(lows)].min().item()
        m["clip_ratio/high_max"] = highs[~torch.isnan(highs)].max().item()
    elif lt == "cispo":
        m["cispo_clip_ratio"] = masked_mean(((coef_1 > eps_high) & (adv > 0)).to(DT))
    elif lt == "vespo":
        m["vespo/phi_seq_mean"] = masked_mean(phi)
    return out


def main():
    cases = json.load(sys.stdin)
    out = []
    for c in cases:
        if c["kind"] == "gdpo":
            out.append({"adv": gdpo(c["by_func"], c["weights"], c["g"])})
        elif c["kind"] == "filter_groups":
            out.append(filter_groups(c["rounds"], c["g"], c["want"], c.get("max_rounds", 0)))
        elif c["kind"] == "adaptive_entropy":
            out.append(adaptive_entropy(c["params"], c["entropies"]))
        elif c["kind"] == "adv":
            a, frac = advantages(c["rewards"], c["g"], c["scale"])
            out.append({"adv": a, "frac": frac})
        else:
            out.append(loss(c))
    json.dump(out, sys.stdout)


main()
