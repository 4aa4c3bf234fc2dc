"""Independent PyTorch (fp32) reference for rlhfstation's model package.

Reads Hugging Face model folders (config.json + model.safetensors, parsed here with
json/struct/numpy) and runs the gpt2 and llama-family (llama, mistral, qwen2) forward
passes written directly with torch ops. Jobs arrive as one JSON document on stdin:

  {"jobs": [{"model": DIR, "seqs": [[ids]...],          # logits of every position
             "greedy": {"prompt": [ids], "n": N},        # greedy continuation (optional)
             "grad": {"seqs": [[ids]], "dlogp": [[w]], "temperature": T}}]}  # optional

and the answer is one JSON document on stdout:

  {"results": [{"logits": [[[...]]], "greedy": [ids],
                "grad": {"logp": [[...]], "params": {name: flat list}}}]}

For "grad", loss = sum_i dlogp[s][i] * log p(seq[i] | seq[<i]) under softmax(logits/T),
and params holds d loss / d param for every tensor in the stored layout.
"""
import json
import math
import struct
import sys

import numpy as np
import torch

torch.set_grad_enabled(False)
torch.set_num_threads(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = raw[base + b: base + end]
        dt = e["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4").astype(np.float32)
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError("dtype " + dt)
        out[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return out


def load(dirname):
    with open(dirname + "/config.json") as f:
        cfg = json.load(f)
    w = read_safetensors(dirname + "/model.safetensors")
    if cfg["model_type"] == "gpt2":
        w = {(k if k.startswith("transformer.") or k.startswith("lm_head") else "transformer." + k): v
             for k, v in w.items()}
    return cfg, w


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def inv_freq(cfg, hd):
    params = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    sc = cfg.get("rope_scaling") or (params if params.get("rope_type", "default") != "default" else None)
    if sc:
        typ = sc.get("rope_type", sc.get("type"))
        factor = sc["factor"]
        if typ == "linear":
            inv = inv / factor
        elif typ == "llama3":
            old = sc["original_max_position_embeddings"]
            lo, hi = sc["low_freq_factor"], sc["high_freq_factor"]
            low_wave, high_wave = old / lo, old / hi
            wave = 2 * math.pi / inv
            scaled = torch.where(wave > low_wave, inv / factor, inv)
            smooth = (old / wave - lo) / (hi - lo)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wave < high_wave) * ~(wave > low_wave)
            inv = torch.where(medium, smoothed, scaled)
        elif typ != "default":
            raise ValueError(typ)
    return inv


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def attend(q, k, v, scale, window):
    # q [H,T,hd], k/v [H,T,hd] (already repeated for GQA)
    T = q.shape[1]
    s = (q @ k.transpose(1, 2)) * scale
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    mask = j > i
    if window:
        mask = mask | (j <= i - window)
    s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p @ v


def forward_llama(cfg, w, ids):
    D = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = cfg.get("head_dim") or D // H
    eps = cfg.get("rms_norm_eps", 1e-6)
    window = cfg.get("sliding_window") if cfg["model_type"] == "mistral" else None
    T = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    freqs = torch.arange(T).float()[:, None] * inv_freq(cfg, hd)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def lin(name, h):
        y = h @ w[name + ".weight"].T
        if name + ".bias" in w:
            y = y + w[name + ".bias"]
        return y

    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = lin(p + "self_attn.q_proj", h).view(T, H, hd).transpose(0, 1)
        k = lin(p + "self_attn.k_proj", h).view(T, KV, hd).transpose(0, 1)
        v = lin(p + "self_attn.v_proj", h).view(T, KV, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=0)
        v = v.repeat_interleave(H // KV, dim=0)
        o = attend(q, k, v, 1.0 / math.sqrt(hd), window)
        o = o.transpose(0, 1).reshape(T, H * hd)
        x = x + lin(p + "self_attn.o_proj", o)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = lin(p + "mlp.gate_proj", h)
        u = lin(p + "mlp.up_proj", h)
        x = x + lin(p + "mlp.down_proj", torch.nn.functional.silu(g) * u)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", False):
        head = w["model.embed_tokens.weight"]
    return x @ head.T


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def forward_gpt2(cfg, w, ids):
    D = cfg["n_embd"]
    H = cfg["n_head"]
    hd = D // H
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    T = len(ids)
    x = w["transformer.wte.weight"][torch.tensor(ids)] + w["transformer.wpe.weight"][torch.arange(T)]

    def conv(name, h):
        return h @ w[name + ".weight"] + w[name + ".bias"]

    def ln(name, h):
        return torch.nn.functional.layer_norm(h, (D,), w[name + ".weight"], w[name + ".bias"], eps)

    for l in range(cfg["n_layer"]):
        p = "transformer.h.%d." % l
        h = ln(p + "ln_1", x)
        qkv = conv(p + "attn.c_attn", h)
        q, k, v = qkv.split(D, dim=-1)
        q, k, v = [t.view(T, H, hd).transpose(0, 1) for t in (q, k, v)]
        o = attend(q, k, v, 1.0 / math.sqrt(hd), None).transpose(0, 1).reshape(T, D)
        x = x + conv(p + "attn.c_proj", o)
        h = ln(p + "ln_2", x)
        x = x + conv(p + "mlp.c_proj", gelu_tanh(conv(p + "mlp.c_fc", h)))
    x = ln("transformer.ln_f", x)
    head = w.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", True):
        head = w["transformer.wte.weight"]
    return x @ head.T


def forward(cfg, w, ids):
    if cfg["model_type"] == "gpt2":
        return forward_gpt2(cfg, w, ids)
    if cfg["model_type"] in ("llama", "mistral", "qwen2"):
        return forward_llama(cfg, w, ids)
    raise ValueError(cfg["model_type"])


def greedy(cfg, w, prompt, n):
    ids = list(prompt)
    out = []
    for _ in range(n):
        t = int(torch.argmax(forward(cfg, w, ids)[-1]))
        out.append(t)
        ids.append(t)
    return out


def grad(cfg, w, job):
    T = job.get("temperature") or 1.0
    params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    logps = []
    with torch.enable_grad():
        loss = 0.0
        for seq, d in zip(job["seqs"], job["dlogp"]):
            logits = forward(cfg, params, seq)
            lp = torch.log_softmax(logits[:-1] / T, dim=-1).gather(1, torch.tensor(seq[1:])[:, None])[:, 0]
            logps.append([0.0] + lp.tolist())
            loss = loss + (torch.tensor(d[1:], dtype=torch.float32) * lp).sum()
        loss.backward()
    return {"logp": logps,
            "params": {k: (v.grad.flatten().tolist() if v.grad is not None else [0.0] * v.numel())
                       for k, v in params.items()}}


def main():
    req = json.load(sys.stdin)
    results = []
    for job in req["jobs"]:
        cfg, w = load(job["model"])
        r = {}
        if "seqs" in job:
            r["logits"] = [forward(cfg, w, s).tolist() for s in job["seqs"]]
        if "greedy" in job:
            r["greedy"] = greedy(cfg, w, job["greedy"]["prompt"], job["greedy"]["n"])
        if "grad" in job:
            r["grad"] = grad(cfg, w, job["grad"])
        results.append(r)
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()
