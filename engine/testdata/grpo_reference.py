"""Independent PyTorch reference for one GRPO gradient step of rlhfstation's engine.

The model's forward comes from engine/model/testdata/reference.py (imported, not copied); this
script adds what a GRPO step puts on top of it, written from DESIGN section 5:

  - LoRA on every adapted linear: W x + s * B (A x). It is applied as the merged weight
    W + s * B A (W^T + s * (B A)^T for GPT-2's Conv1D layout), which is the same function of A
    and B, so autograd gives the same dA and dB.
  - policy log-probs: log_softmax(logits / T) with the adapters, gathered at the completion
    tokens; reference log-probs: the same with the adapters off (no gradient).
  - group advantages from the rewards (scale_rewards group, batch or none; std + 1e-4).
  - the per-token loss -min(ratio A, clamp(ratio, 1-eps, 1+eps_high) A) + beta KL_t with
    ratio = exp(logp - logp.detach()) and KL_t = exp(ref - logp) - (ref - logp) - 1, aggregated
    by loss_type; with several micro-batches dapo divides by the tokens of all of them and the
    other types average the micro-batches' losses (gradient accumulation).

Everything runs in float64, so the reference's own rounding is far below the test's tolerance.

Input (stdin, JSON):
  {"models": {NAME: {"dir": DIR, "lora": {MODULE: {"r": R, "in": I, "out": O, "scale": S,
                                                    "a": [R*I], "b": [O*R]}}}},
   "cases": [{"model": NAME, "temperature": T, "loss_type": L, "scale_rewards": SR,
              "beta": B, "epsilon": E, "epsilon_high": EH, "max_completion_length": M,
              "num_generations": G,
              "micro_batches": [{"prompts": [[ids]], "completions": [[ids]], "rewards": [r]}]}]}
Output (stdout, JSON):
  {"results": [{"loss": L, "loss_scale": (the aggregation of |loss_t|), "advantages": [[a]], "grads": {MODULE: {"a": [...], "b": [...]}}}]}
"""
import json
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


def completion_logps(cfg, w, prompt, completion, temperature):
    """log p(completion[k] | prompt, completion[<k]) under softmax(logits / T)."""
    seq = list(prompt) + list(completion)
    logits = reference.forward(cfg, w, seq)
    lp = torch.log_softmax(logits[:-1] / temperature, dim=-1)
    lp = lp.gather(1, torch.tensor(seq[1:])[:, None])[:, 0]
    return lp[len(prompt) - 1:]


def micro_loss(case, per_seq, adv, n_all_tokens):
    """The micro-batch's loss (per-token GRPO terms aggregated by loss_type), and the same
    aggregation of |term|: the scale the loss's tolerance is relative to."""
    eps, eps_high, beta = case["epsilon"], case["epsilon_high"], case["beta"]
    terms = []
    for (lp, ref), a in zip(per_seq, adv):
        ratio = torch.exp(lp - lp.detach())
        clipped = torch.clamp(ratio, 1 - eps, 1 + eps_high)
        t = -torch.minimum(ratio * a, clipped * a)
        if beta != 0:
            t = t + beta * (torch.exp(ref - lp) - (ref - lp) - 1)
        terms.append(t)
    lt = case["loss_type"]
    n_seq = len(terms)
    n_tok = sum(t.numel() for t in terms)

    def aggregate(ts):
        if lt == "grpo":
            return sum(t.sum() / max(t.numel(), 1) for t in ts) / n_seq
        if lt == "bnpo":
            return sum(t.sum() for t in ts) / max(n_tok, 1)
        if lt == "dr_grpo":
            return sum(t.sum() for t in ts) / (n_seq * case["max_completion_length"])
        if lt == "dapo":
            return sum(t.sum() for t in ts) / max(n_all_tokens, 1)
        raise ValueError(lt)

    return aggregate(terms), aggregate([t.detach().abs() for t in terms]).item()


def run_case(case, model):
    cfg, base, lora = model["cfg"], model["w"], model["lora"]
    T = case["temperature"]
    params = {m: {"a": torch.tensor(s["a"], dtype=DT).view(s["r"], s["in"]).requires_grad_(True),
                  "b": torch.tensor(s["b"], dtype=DT).view(s["out"], s["r"]).requires_grad_(True)}
              for m, s in lora.items()}
    mbs = case["micro_batches"]
    ga = len(mbs)
    n_all = sum(len(c) for mb in mbs for c in mb["completions"])
    total = torch.zeros((), dtype=DT)
    scale = 0.0
    advs = []
    with torch.enable_grad():
        w = merged(cfg, base, lora, params)
        for mb in mbs:
            adv = advantages(mb["rewards"], case["num_generations"], case["scale_rewards"])
            advs.append(adv.tolist())
            per_seq = []
            for p, c in zip(mb["prompts"], mb["completions"]):
                lp = completion_logps(cfg, w, p, c, T)
                key = (case["model"], T, tuple(p), tuple(c))
                if key not in REF:  # the reference depends on the sequence alone
                    with torch.no_grad():
                        REF[key] = completion_logps(cfg, base, p, c, T)
                ref = REF[key]
                per_seq.append((lp, ref))
            loss, size = micro_loss(case, per_seq, adv, n_all)
            if case["loss_type"] != "dapo":
                loss, size = loss / ga, size / ga  # the accumulated micro-batches average
            total, scale = total + loss, scale + size
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
