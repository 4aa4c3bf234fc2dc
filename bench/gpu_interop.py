#!/usr/bin/env python3
"""A run's adapter through peft and its merged folder through transformers, against our own scores.

bench/gpu.sh runs a short `--batch` on the GPU, scores a few texts with `rlhfstation score --json`
(base alone, and with the run's last checkpoint as adapter), merges the checkpoint with
`rlhfstation merge`, then calls this script. It loads

  - the base folder with transformers (float32),
  - the base plus the checkpoint with peft's PeftModel.from_pretrained,
  - the merged folder with transformers,

and scores the same token ids, printing one JSON line per comparison with the largest absolute
difference of a token's log-probability. The adapter must change the scores (its own difference
from the base is printed too): a comparison that could not fail would prove nothing.
"""
import argparse
import json
import sys

import torch
import transformers
import peft


def token_logprobs(model, ids, device):
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        logits = model(input_ids=x).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    # Our scorer leaves a text's first token unscored when the model has no BOS; position i is
    # scored from the logits at i-1.
    return [None] + [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]


def max_diff(a, b):
    d = [abs(x - y) for x, y in zip(a, b) if x is not None and y is not None]
    return max(d) if d else float("nan"), len(d)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--merged", required=True)
    p.add_argument("--ours-base", required=True, help="rlhfstation score --json without the adapter")
    p.add_argument("--ours-adapter", required=True, help="rlhfstation score --json with the adapter")
    p.add_argument("--label", default="")
    p.add_argument("--tol", type=float, default=1e-3, help="largest log-prob difference that agrees")
    p.add_argument("--min-effect", type=float, default=1e-2, help="smallest change the adapter must make")
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ours_base = json.load(open(a.ours_base))["texts"]
    ours_adapter = json.load(open(a.ours_adapter))["texts"]

    base = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).to(device).eval()
    rows = []
    for t in ours_base:
        rows.append(("transformers base vs ours base", token_logprobs(base, t["ids"], device), t["logprobs"]))
    base_scores = [token_logprobs(base, t["ids"], device) for t in ours_adapter]
    with_adapter = peft.PeftModel.from_pretrained(base, a.adapter).eval()
    for t, b in zip(ours_adapter, base_scores):
        mine = token_logprobs(with_adapter, t["ids"], device)
        rows.append(("peft adapter vs ours adapter", mine, t["logprobs"]))
        rows.append(("(adapter's own effect: peft adapter vs transformers base)", mine, b))
    del with_adapter, base
    merged = transformers.AutoModelForCausalLM.from_pretrained(a.merged, dtype=torch.float32).to(device).eval()
    for t in ours_adapter:
        rows.append(("transformers merged vs ours adapter", token_logprobs(merged, t["ids"], device), t["logprobs"]))

    worst = {}
    for name, x, y in rows:
        d, n = max_diff(x, y)
        w = worst.setdefault(name, [0.0, 0])
        w[0] = max(w[0], d)
        w[1] += n
    for name, (d, n) in worst.items():
        print(json.dumps({"label": a.label, "comparison": name, "max_abs_logprob_diff": d, "tokens": n,
                          "device": device, "transformers": transformers.__version__, "peft": peft.__version__}))
    agree = all(d < a.tol for name, (d, _) in worst.items() if not name.startswith("("))
    effect = worst.get("(adapter's own effect: peft adapter vs transformers base)", [0])[0]
    ok = agree and effect > a.min_effect
    print(json.dumps({"label": a.label, "tolerance": a.tol, "agree": agree, "adapter_effect": effect,
                      "verdict": "PASS" if ok else "FAIL"}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
