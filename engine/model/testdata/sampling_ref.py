# Independent reference for engine/model's min_p and repetition_penalty: the distribution
# Hugging Face transformers samples from, written in PyTorch as its logits processors define
# it (repetition penalty on the raw scores; then temperature, top-k, top-p, min-p warpers).
# Reads a JSON list of cases on stdin, prints each case's probabilities.
import json
import sys

import torch


def probs(c):
    scores = torch.tensor(c["logits"], dtype=torch.float64)
    pen = c["repetition_penalty"]
    if pen != 1.0 and c["seen"]:
        ids = torch.tensor(c["seen"], dtype=torch.long)
        s = torch.gather(scores, 0, ids)
        s = torch.where(s < 0, s * pen, s / pen)
        scores = scores.scatter(0, ids, s)
    scores = scores / c["temperature"]
    if c["top_k"] > 0:
        kth = torch.topk(scores, min(c["top_k"], scores.numel()))[0][-1]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if 0 < c["top_p"] < 1:
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= (1 - c["top_p"])
        remove[-1] = False
        scores = scores.masked_fill(remove.scatter(0, sorted_idx, remove), -float("inf"))
    if c["min_p"] > 0:
        p = scores.softmax(dim=-1)
        remove = p < c["min_p"] * p.max()
        scores = scores.masked_fill(remove, -float("inf"))
    return scores.softmax(dim=-1).tolist()


json.dump([probs(c) for c in json.load(sys.stdin)], sys.stdout)
