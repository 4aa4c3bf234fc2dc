"""Independent PyTorch reference for one GRPO gradient step of rlhfstation's engine.

The model's forward comes from engine/model/testdata/reference.py (imported, not copied); this
script adds what a GRPO step puts on top of it, written from DESIGN section 5:

  - LoRA on every adapted linear: W x + s * B (A x). It is applied as the merged weight
    W + s * B A (W^T + s * (B A)^T for GPT-2's Conv1D layout), which is the same function of A
    and B, so autograd gives the same dA and dB.
  - policy log-probs: log_softmax(logits / T) with the adapters, gathered at the completion
    tokens; reference log-probs: the same with the adapters off (no gradient).
  - group advantages from the rewards (scale_rewards group, batch or none; std + 1e-4).
  - the per-token policy term of each loss_type with the importance weight w = exp(logp - old)
    per token, or exp(mean(logp - old)) per sequence (GSPO); old = logp.detach() unless the
    case gives "old_lora", the adapters at sampling time (num_iterations > 1):
      grpo, bnpo, dr_grpo, dapo, luspo: -min(w A, clamp(w, 1-eps, 1+eps_high) A)
      cispo: -sg(min(w, eps_high)) A logp;  sapo: -sigmoid(tau (w - 1)) 4/tau A
      vespo: -sg(phi(W)) A logp with W = exp(sum(logp - old)), phi = e^lam W^k e^(-lam W)
    times the entropy filter (top_entropy_quantile rho: the token's entropy at least the
    (1 - rho) quantile of the micro-batch's), plus beta KL_t, KL_t = exp(ref - logp) - (ref - logp) - 1;
    completions marked truncated have no loss token with mask_truncated_completions;
    aggregated by loss_type; with "entropy_coef" c, minus c times the entropy bonus (TRL 1.9's):
    the sum of the entropies (differentiable: they depend on A and B) over the loss tokens the
    entropy filter keeps, divided by their number (dapo, cispo, vespo: by the accumulated
    batch's loss tokens). A case's micro-batches are one generation batch (TRL's): the
    advantages are computed over all of them (scale_rewards "batch": the std of all their
    rewards), dapo, cispo and vespo divide by the loss tokens of all of them, and the other
    types average the losses of the micro-batches trained on (gradient accumulation). A
    micro-batch marked "skip" is part of the generation batch but not trained on in this
    step (steps_per_generation > gradient_accumulation_steps).

NTL as an auxiliary loss (the case's "ntl": loss_weight, loss "mse"|"wasserstein", the digit
tokens' ids and digit values; each micro-batch's "ntl_positions": per completion the
[completion token index, target digit] pairs) adds loss_weight times the mean, over every such
position of the micro-batches trained on (completions dropped by mask_truncated_completions
left out), of the cost of p(d): the softmax over the digit tokens' raw logits (temperature 1)
in the distribution that predicts that token, summed per digit value (DESIGN 6.2).

Everything runs in float64, so the reference's own rounding is far below the test's tolerance.

Input (stdin, JSON):
  {"models": {NAME: {"dir": DIR, "lora": {MODULE: {"r": R, "in": I, "out": O, "scale": S,
                                                    "a": [R*I], "b": [O*R]}}}},
   "cases": [{"model": NAME, "temperature": T, "loss_type": L, "scale_rewards": SR,
              "beta": B, "epsilon": E, "epsilon_high": EH, "max_completion_length": M,
              "num_generations": G, "importance_sampling_level": "token"|"sequence",
              "mask_truncated_completions": bool, "top_entropy_quantile": RHO,
              "sapo_temperature_pos"/"_neg", "vespo_k_pos"/"_lambda_pos"/"_k_neg"/"_lambda_neg",
              "old_lora": {MODULE: {...}} (optional),
              "micro_batches": [{"prompts": [[ids]], "completions": [[ids]], "rewards": [r],
                                 "truncated": [bool], "skip": bool}]}]}
Output (stdout, JSON):
  {"results": [{"loss": L, "loss_scale": (the aggregation of |loss_t|), "advantages": [[a]], "grads": {MODULE: {"a": [...], "b": [...]}}}]}
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "testdata"))
import reference  # noqa: E402  (engine/model/testdata/reference.py: load, forward)

DT = torch.float64
REF = {}  # reference log-probs by (model, temperature, prompt, completion)


def advantages(rewards, g, scale):
    """DESIGN 5: A_i = r_i - mean(group), / (std + 1e-4) for group (the group's std) or batch."""
    r = torch.tensor(rewards, dtype=DT)
    groups = r.view(-1, g)
    a = (groups - groups.mean(dim=1, keepdim=True)).reshape(-1)
    if scale == "group":
        a = a / (groups.std(dim=1, unbiased=True).repeat_interleave(g) + 1e-4)
    elif scale == "batch":
        a = a / (r.std(unbiased=True) + 1e-4)
    elif scale != "none":
        raise ValueError(scale)
    return a


def merged(cfg, base, lora, params):
    """Weights with every adapter folded in: W + s * B A, as a function of the A, B leaves."""
    w = dict(base)
    gpt2 = cfg["model_type"] == "gpt2"
    for mod, spec in lora.items():
        delta = spec["scale"] * (params[mod]["b"] @ params[mod]["a"])  # [out, in]
        key = mod + ".weight"
        w[key] = base[key] + (delta.T if gpt2 else delta)
    return w


def completion_logps(cfg, w, prompt, completion, temperature, raw=False):
    """log p(completion[k] | prompt, completion[<k]) under softmax(logits / T), and the entropy
    of each of those distributions (with its gradient); with raw, also the raw logits of those
    rows."""
    seq = list(prompt) + list(completion)
    logits = reference.forward(cfg, w, seq)
    logp_all = torch.log_softmax(logits[:-1] / temperature, dim=-1)
    lp = logp_all.gather(1, torch.tensor(seq[1:])[:, None])[:, 0]
    ent = -(logp_all.exp() * logp_all).sum(-1)
    if raw:
        return lp[len(prompt) - 1:], ent[len(prompt) - 1:], logits[len(prompt) - 1:-1]
    return lp[len(prompt) - 1:], ent[len(prompt) - 1:]


def ntl_cost(ntl, row, target):
    """NTL's cost at one position: p(d) from the softmax over the digit tokens' logits."""
    p_tok = torch.softmax(row[torch.tensor(ntl["digit_ids"])], dim=-1)
    p = torch.zeros(10, dtype=DT).index_add(0, torch.tensor(ntl["digit_values"]), p_tok)
    d = torch.arange(10, dtype=DT)
    if ntl["loss"] == "mse":
        return ((d * p).sum() - target) ** 2
    if ntl["loss"] == "wasserstein":
        return (p * (d - target).abs()).sum()
    raise ValueError(ntl["loss"])


def quantile(x, q):
    """torch.quantile's linear interpolation, as TRL thresholds the entropies."""
    return torch.quantile(x, q).item()


def micro_loss(case, per_seq, adv, n_all_tokens):
    """The micro-batch's loss (per-token GRPO terms aggregated by loss_type), and the same
    aggregation of |term|: the scale the loss's tolerance is relative to.

    per_seq holds (logp, ref, old, entropy, truncated) per completion; old is None for
    num_iterations = 1 (logp detached). A completion dropped by mask_truncated_completions
    has no loss token; the entropy filter keeps the policy term of tokens whose entropy is at
    least the (1 - rho) quantile of the micro-batch's loss tokens (the KL term stays)."""
    eps, eps_high, beta = case["epsilon"], case["epsilon_high"], case["beta"]
    lt = case["loss_type"]
    level = case.get("importance_sampling_level") or "token"
    rho = case.get("top_entropy_quantile", 1.0)
    kept = [not (case.get("mask_truncated_completions") and trunc) for (_, _, _, _, trunc) in per_seq]
    thr = None
    if rho < 1.0:
        ents = [e.detach() for (_, _, _, e, _), k in zip(per_seq, kept) if k]
        thr = quantile(torch.cat(ents), 1 - rho) if ents else float("inf")
    terms = []
    for (lp, ref, old, ent, _), a, k in zip(per_seq, adv, kept):
        if not k:
            terms.append(lp[:0])  # no loss token
            continue
        log_ratio = lp - (lp.detach() if old is None else old)
        if level == "sequence":
            w = torch.exp(log_ratio.mean()).expand(lp.numel())
        else:
            w = torch.exp(log_ratio)
        if lt == "cispo":
            t = -torch.clamp(w, max=eps_high).detach() * a * lp
        elif lt == "sapo":
            tau = case["sapo_temperature_pos"] if a > 0 else case["sapo_temperature_neg"]
            t = -torch.sigmoid(tau * (w - 1)) * 4 / tau * a
        elif lt == "vespo":
            with torch.no_grad():
                lw = torch.clamp(torch.clamp(log_ratio, -20, 20).sum(), math.log(1e-8), 20.0)
                kk, lam = ((case["vespo_k_pos"], case["vespo_lambda_pos"]) if a >= 0
                           else (case["vespo_k_neg"], case["vespo_lambda_neg"]))
                lam = max(lam, 1e-4)
                phi = torch.exp(lam + kk * lw - lam * torch.exp(lw))
            t = -phi * a * lp
        else:
            clipped = torch.clamp(w, 1 - eps, 1 + eps_high)
            t = -torch.minimum(w * a, clipped * a)
        if thr is not None:
            t = t * (ent.detach() >= thr).to(DT)
        if beta != 0:
            t = t + beta * (torch.exp(ref - lp) - (ref - lp) - 1)
        terms.append(t)
    n_seq = len(terms)
    n_tok = sum(t.numel() for t in terms)

    def aggregate(ts):
        if lt in ("grpo", "sapo"):
            return sum(t.sum() / max(t.numel(), 1) for t in ts) / n_seq
        if lt == "bnpo":
            return sum(t.sum() for t in ts) / max(n_tok, 1)
        if lt == "dr_grpo":
            return sum(t.sum() for t in ts) / (n_seq * case["max_completion_length"])
        if lt in ("dapo", "cispo", "vespo"):
            return sum(t.sum() for t in ts) / max(n_all_tokens, 1)
        if lt == "luspo":
            return sum(t.sum() for t in ts) / n_seq
        raise ValueError(lt)

    total = aggregate(terms)
    if not torch.is_tensor(total):
        total = torch.zeros((), dtype=DT)
    size = float(aggregate([t.detach().abs() for t in terms]))
    coef = case.get("entropy_coef") or 0.0
    if coef != 0:  # the entropy bonus over the loss tokens the entropy filter keeps
        kept_ents = [e if thr is None else e * (e.detach() >= thr).to(DT)
                     for (_, _, _, e, _), k in zip(per_seq, kept) if k]
        n_kept = sum(int((e.detach() >= (thr if thr is not None else -1.0)).sum()) for (_, _, _, e, _), k in zip(per_seq, kept) if k)
        s = sum(e.sum() for e in kept_ents) if kept_ents else torch.zeros((), dtype=DT)
        den = n_all_tokens if lt in ("dapo", "cispo", "vespo") else n_kept
        bonus = coef * s / max(den, 1)
        total = total - bonus
        size += abs(bonus.item())
    return total, size


def run_case(case, model):
    cfg, base, lora = model["cfg"], model["w"], model["lora"]
    T = case["temperature"]
    params = {m: {"a": torch.tensor(s["a"], dtype=DT).view(s["r"], s["in"]).requires_grad_(True),
                  "b": torch.tensor(s["b"], dtype=DT).view(s["out"], s["r"]).requires_grad_(True)}
              for m, s in lora.items()}
    old_w = None
    if case.get("old_lora"):  # the adapters at sampling time: num_iterations > 1
        old_params = {m: {"a": torch.tensor(s["a"], dtype=DT).view(s["r"], s["in"]),
                          "b": torch.tensor(s["b"], dtype=DT).view(s["out"], s["r"])}
                      for m, s in case["old_lora"].items()}
        old_w = merged(cfg, base, case["old_lora"], old_params)
    mbs = case["micro_batches"]
    ga = sum(1 for mb in mbs if not mb.get("skip"))
    all_adv = advantages([r for mb in mbs for r in mb["rewards"]], case["num_generations"], case["scale_rewards"])
    masking = case.get("mask_truncated_completions")
    n_all = sum(len(c) for mb in mbs for c, tr in zip(mb["completions"], mb.get("truncated") or [False] * len(mb["completions"]))
                if not (masking and tr))
    ntl = case.get("ntl")
    n_ntl = 0
    if ntl:
        for mb in mbs:
            if mb.get("skip"):
                continue
            truncated = mb.get("truncated") or [False] * len(mb["completions"])
            for pos, tr in zip(mb.get("ntl_positions") or [], truncated):
                if not (masking and tr):
                    n_ntl += len(pos or [])
    total = torch.zeros((), dtype=DT)
    scale = 0.0
    advs = []
    with torch.enable_grad():
        w = merged(cfg, base, lora, params)
        start = 0
        for mb in mbs:
            adv = all_adv[start:start + len(mb["rewards"])]
            start += len(mb["rewards"])
            advs.append(adv.tolist())
            if mb.get("skip"):
                continue
            per_seq = []
            truncated = mb.get("truncated") or [False] * len(mb["completions"])
            ntl_pos = mb.get("ntl_positions") or [[] for _ in mb["completions"]]
            aux = torch.zeros((), dtype=DT)
            for p, c, tr, npos in zip(mb["prompts"], mb["completions"], truncated, ntl_pos):
                lp, ent, raw = completion_logps(cfg, w, p, c, T, raw=True)
                if ntl and n_ntl and not (masking and tr):
                    for k, target in npos or []:
                        aux = aux + ntl["loss_weight"] * ntl_cost(ntl, raw[k], target) / n_ntl
                key = (case["model"], T, tuple(p), tuple(c))
                if key not in REF:  # the reference depends on the sequence alone
                    with torch.no_grad():
                        REF[key] = completion_logps(cfg, base, p, c, T)[0]
                old = None
                if old_w is not None:
                    with torch.no_grad():
                        old = completion_logps(cfg, old_w, p, c, T)[0]
                per_seq.append((lp, REF[key], old, ent, tr))
            loss, size = micro_loss(case, per_seq, adv.tolist(), n_all)
            if case["loss_type"] not in ("dapo", "cispo", "vespo"):
                loss, size = loss / ga, size / ga  # the accumulated micro-batches average
            total, scale = total + loss + aux, scale + size + abs(aux.item())
        total.backward()
    grads = {m: {"a": p["a"].grad.flatten().tolist(), "b": p["b"].grad.flatten().tolist()}
             for m, p in params.items()}
    return {"loss": total.item(), "loss_scale": scale, "advantages": advs, "grads": grads}


def main():
    req = json.load(sys.stdin)
    torch.set_num_threads(1)
    models = {}
    for name, spec in req["models"].items():
        cfg, w = reference.load(spec["dir"])
        models[name] = {"cfg": cfg, "w": {k: v.to(DT) for k, v in w.items()}, "lora": spec["lora"]}
    out = [run_case(c, models[c["model"]]) for c in req["cases"]]
    json.dump({"results": out}, sys.stdout)


if __name__ == "__main__":
    main()
