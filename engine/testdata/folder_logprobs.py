"""Log-probabilities of token sequences under a plain Hugging Face model folder, with the
from-scratch PyTorch forward of the model tests (engine/model/testdata/reference.py). The
weights are read here from model.safetensors or from the shards that
model.safetensors.index.json lists, with reference.py's own safetensors parser.

usage: folder_logprobs.py < {"jobs": [{"dir": DIR, "seqs": [[ids]...]}...]}
  → {"results": [{"logp": [[0, log p(t1|t0), ...]...]}...]}
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "testdata"))
import reference  # noqa: E402


def load(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for name in files:
        w.update(reference.read_safetensors(os.path.join(d, name)))
    if cfg["model_type"] == "gpt2":
        w = {(k if k.startswith("transformer.") or k.startswith("lm_head") else "transformer." + k): v
             for k, v in w.items()}
    return cfg, w


def main():
    results = []
    for job in json.load(sys.stdin)["jobs"]:
        cfg, w = load(job["dir"])
        out = []
        for seq in job["seqs"]:
            logits = reference.forward(cfg, w, seq)
            lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(seq[1:])[:, None])[:, 0]
            out.append([0.0] + lp.tolist())
        results.append({"logp": out})
    json.dump({"results": results}, sys.stdout)


main()
