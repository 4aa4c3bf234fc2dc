"""Independent check of LoRA adapters: merges a PEFT adapter folder into the base weights as
W + s·B·A (PEFT's merge_and_unload; s = alpha/r, or alpha/sqrt(r) with rslora) and returns the
log-probability of every token, with the from-scratch PyTorch forward of the model tests.

usage: merge_adapter.py MODEL_DIR ADAPTER_DIR < {"seqs": [[ids]...]}  →  {"logp": [[...]]}
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "model", "testdata"))
import reference  # noqa: E402


def main():
    model_dir, adapter_dir = sys.argv[1], sys.argv[2]
    cfg, w = reference.load(model_dir)
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        acfg = json.load(f)
    r = acfg["r"]
    s = acfg["lora_alpha"] / (math.sqrt(r) if acfg.get("use_rslora") else r)
    ad = reference.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    merged = 0
    for name, a in ad.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[len("base_model.model."):-len(".lora_A.weight")]
        b = ad[name.replace("lora_A", "lora_B")]
        key = module + ".weight"
        if key not in w and cfg["model_type"] == "gpt2":
            key = "transformer." + key
        delta = s * (b @ a)  # [out, in]
        if cfg["model_type"] == "gpt2":
            delta = delta.T  # Conv1D weights are stored [in, out]
        w[key] = w[key] + delta
        merged += 1
    req = json.load(sys.stdin)
    out = []
    for seq in req["seqs"]:
        logits = reference.forward(cfg, w, seq)
        lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(seq[1:])[:, None])[:, 0]
        out.append([0.0] + lp.tolist())
    json.dump({"logp": out, "merged": merged}, sys.stdout)


main()
