"""Independent PyTorch (fp32) reference for rlhfstation's model package.

Reads Hugging Face model folders (config.json + model.safetensors, parsed here with
json/struct/numpy) and runs each family's forward pass written directly with torch ops from
its maths: gpt2; llama, mistral, qwen2; qwen3 (q/k RMSNorm); gemma ((1+w) RMSNorm, √hidden
embedding scale, GeGLU); gemma2 (norms around attention and MLP, attention and final logit
soft-capping, query_pre_attn_scalar, alternating sliding windows); gemma3_text (gemma2's
norms, q/k norms, local/global RoPE bases, 5:1 sliding pattern); phi3 (fused qkv_proj and
gate_up_proj, partial rotary, longrope); smollm3 (llama with layers that skip RoPE); olmo2
(norms on attention's and the MLP's outputs only, q and k normalised over whole rows). Jobs arrive as one JSON document on stdin:

  {"jobs": [{"make": {"dir": DIR, "config": {...}, "dtype": "F32"|"BF16", "seed": N}},  # optional
            {"model": DIR, "seqs": [[ids]...],          # logits of every position
             "greedy": {"prompt": [ids], "n": N},        # greedy continuation (optional)
             "grad": {"seqs": [[ids]], "dlogp": [[w]], "temperature": T,     # optional
                      "lora": {"scale": s, "adapters": {module: {"a": [...], "b": [...], "r": r}}}}}]}

"make" writes a small random model of the config's family into DIR (config.json as given,
model.safetensors with every tensor random, stored in dtype) before the job's other parts
run on it. The answer is one JSON document on stdout:

  {"results": [{"logits": [[[...]]], "greedy": [ids],
                "grad": {"logp": [[...]], "params": {name: flat list}, "lora": {module: {"a", "b"}}}}]}

For "grad", loss = sum_i dlogp[s][i] * log p(seq[i] | seq[<i]) under softmax(logits/T),
and params holds d loss / d param for every tensor in the stored layout. With "lora", the
named linears (Hugging Face module names, e.g. model.layers.0.self_attn.qkv_proj) compute
y = x·Wᵀ + scale·(x·Aᵀ)·Bᵀ (A [r,in], B [out,r]) and "lora" holds d loss / dA and dB.
"""
import json
import math
import os
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


GEMMA = ("gemma", "gemma2", "gemma3_text")
SANDWICH = ("gemma2", "gemma3_text")
DECODERS = ("llama", "mistral", "qwen2", "qwen3", "phi3", "smollm3", "olmo2") + GEMMA


def rms_norm(x, w, eps, offset=0.0):
    var = x.pow(2).mean(-1, keepdim=True)
    return (offset + w) * (x * torch.rsqrt(var + eps))


def head_dim(cfg):
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    default = {"gemma": 256, "gemma2": 256, "gemma3_text": 256, "qwen3": 128}.get(cfg["model_type"], D // H)
    hd = cfg.get("head_dim", default)
    return hd if hd else D // H


def rotary_dim(cfg):
    params = cfg.get("rope_parameters") or {}
    p = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor", 1.0))
    return int(head_dim(cfg) * p)


def rope_params(cfg, local):
    """(theta, scaling dict or None) of a layer's RoPE: gemma3's sliding layers have their own base."""
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params:  # transformers 5 keys gemma3's RoPE by layer type
        p = params["sliding_attention" if local else "full_attention"] or {}
        theta = p.get("rope_theta", cfg.get("rope_local_base_freq", 10000.0) if local else cfg.get("rope_theta", 1e6))
        return theta, (p if p.get("rope_type", "default") != "default" else None)
    if local:
        return cfg.get("rope_local_base_freq", 10000.0), None
    default = 1e6 if cfg["model_type"] == "gemma3_text" else 10000.0
    theta = cfg.get("rope_theta", params.get("rope_theta", default))
    sc = cfg.get("rope_scaling") or (params if params.get("rope_type", params.get("type", "default")) != "default" else None)
    return theta, sc


def inv_freq(cfg, rot, local=False, T=0):
    """Inverse frequencies of the rot rotated dimensions and the factor on cos and sin, for a
    forward over T positions (dynamic and longrope depend on it)."""
    theta, sc = rope_params(cfg, local)
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
    mscale = 1.0
    if sc:
        typ = sc.get("rope_type", sc.get("type"))
        if typ == "linear":
            inv = inv / sc["factor"]
        elif typ == "llama3":
            factor = sc["factor"]
            old = sc["original_max_position_embeddings"]
            lo, hi = sc["low_freq_factor"], sc["high_freq_factor"]
            low_wave, high_wave = old / lo, old / hi
            wave = 2 * math.pi / inv
            scaled = torch.where(wave > low_wave, inv / factor, inv)
            smooth = (old / wave - lo) / (hi - lo)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wave < high_wave) * ~(wave > low_wave)
            inv = torch.where(medium, smoothed, scaled)
        elif typ == "dynamic":
            # NTK: past max_position_embeddings the base grows with the sequence
            mp, factor = cfg["max_position_embeddings"], sc["factor"]
            if T > mp:
                theta = theta * ((factor * T / mp) - (factor - 1)) ** (rot / (rot - 2))
                inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
        elif typ == "yarn":
            mp = cfg["max_position_embeddings"]
            old = sc.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings") or mp
            factor = sc.get("factor") or mp / old
            def msc(scale, m=1.0):
                return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
            mscale = sc.get("attention_factor")
            if mscale is None:
                if sc.get("mscale") and sc.get("mscale_all_dim"):
                    mscale = msc(factor, sc["mscale"]) / msc(factor, sc["mscale_all_dim"])
                else:
                    mscale = msc(factor)
            fast, slow = sc.get("beta_fast") or 32, sc.get("beta_slow") or 1
            def corr(n):
                return (rot * math.log(old / (n * 2 * math.pi))) / (2 * math.log(theta))
            lo, hi = corr(fast), corr(slow)
            if sc.get("truncate", True):
                lo, hi = math.floor(lo), math.ceil(hi)
            lo, hi = max(lo, 0), min(hi, rot - 1)
            if lo == hi:
                hi += 0.001
            ramp = torch.clamp((torch.arange(rot // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
            pos = theta ** (torch.arange(0, rot, 2).float() / rot)
            extra = 1 - ramp
            inv = (1.0 / (factor * pos)) * (1 - extra) + (1.0 / pos) * extra
        elif typ in ("longrope", "su"):
            # each frequency divided by its short factor within the original context, by its long
            # factor past it; cos, sin scaled by sqrt(1 + ln(factor) / ln(original context))
            old = sc.get("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
            factor = sc.get("factor") or cfg["max_position_embeddings"] / old
            mscale = sc.get("attention_factor") or (math.sqrt(1 + math.log(factor) / math.log(old)) if factor > 1 else 1.0)
            ext = sc["long_factor"] if T > old else sc["short_factor"]
            inv = 1.0 / (torch.tensor(ext, dtype=torch.float32) *
                         theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
        elif typ != "default":
            raise ValueError(typ)
    return inv, mscale


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x, cos, sin):
    """Rotates the leading cos.shape[-1] dimensions of each head of x [H,T,hd]."""
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def attend(q, k, v, scale, window, softcap=None):
    # q [H,T,hd], k/v [H,T,hd] (already repeated for GQA)
    T = q.shape[1]
    s = (q @ k.transpose(1, 2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    mask = j > i
    if window:
        mask = mask | (j <= i - window)
    s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p @ v


def sliding_layers(cfg):
    """Which layers attend within the sliding window."""
    mt, L = cfg["model_type"], cfg["num_hidden_layers"]
    if mt in SANDWICH:
        if cfg.get("layer_types"):
            return [t == "sliding_attention" for t in cfg["layer_types"]]
        pattern = cfg.get("sliding_window_pattern", 6) if mt == "gemma3_text" else 2
        return [(l + 1) % pattern != 0 for l in range(L)]
    return [mt in ("mistral", "phi3")] * L


def rope_layers(cfg):
    """Which layers rotate q and k: SmolLM3's no_rope_layers (1: yes), else one in
    no_rope_layer_interval without; every layer elsewhere."""
    L = cfg["num_hidden_layers"]
    if cfg["model_type"] != "smollm3":
        return [True] * L
    if cfg.get("no_rope_layers") is not None:
        return [bool(cfg["no_rope_layers"][l]) for l in range(L)]
    every = cfg.get("no_rope_layer_interval", 4)
    return [(l + 1) % every != 0 for l in range(L)]


def softcaps(cfg):
    if cfg["model_type"] == "gemma2":
        return cfg.get("attn_logit_softcapping", 50.0), cfg.get("final_logit_softcapping", 30.0)
    if cfg["model_type"] == "gemma3_text":
        return cfg.get("attn_logit_softcapping"), cfg.get("final_logit_softcapping")
    return None, None


def forward_decoder(cfg, w, ids, lora=None):
    mt = cfg["model_type"]
    gemma, sandwich = mt in GEMMA, mt in SANDWICH
    D = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = head_dim(cfg)
    rot = rotary_dim(cfg)
    eps = cfg.get("rms_norm_eps", 1e-5 if mt in ("phi3", "olmo2") else 1e-6)
    offset = 1.0 if gemma else 0.0
    window = cfg.get("sliding_window")
    sliding = sliding_layers(cfg)
    use_rope = rope_layers(cfg)
    attn_cap, final_cap = softcaps(cfg)
    scale = cfg.get("query_pre_attn_scalar", 256) ** -0.5 if sandwich else 1.0 / math.sqrt(hd)
    T = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    if gemma:
        x = x * math.sqrt(D)

    def table(local):
        inv, mscale = inv_freq(cfg, rot, local, T)
        freqs = torch.arange(T).float()[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * mscale, emb.sin() * mscale
    tables = {False: table(False)}
    if mt == "gemma3_text":
        tables[True] = table(True)

    def lin(name, h):
        y = h @ w[name + ".weight"].T
        if name + ".bias" in w:
            y = y + w[name + ".bias"]
        if lora and name in lora["adapters"]:
            ad = lora["adapters"][name]
            y = y + lora["scale"] * ((h @ ad["a"].T) @ ad["b"].T)
        return y

    def norm(name, h):
        return rms_norm(h, w[name + ".weight"], eps, offset)

    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = x if mt == "olmo2" else norm(p + "input_layernorm", x)  # olmo2 normalises outputs only
        if mt == "phi3":
            q, k, v = lin(p + "self_attn.qkv_proj", h).split([H * hd, KV * hd, KV * hd], dim=-1)
        else:
            q = lin(p + "self_attn.q_proj", h)
            k = lin(p + "self_attn.k_proj", h)
            v = lin(p + "self_attn.v_proj", h)
        if mt == "olmo2":  # RMSNorm over the whole q and k rows
            q = norm(p + "self_attn.q_norm", q)
            k = norm(p + "self_attn.k_norm", k)
        q = q.view(T, H, hd)
        k = k.view(T, KV, hd)
        if mt in ("qwen3", "gemma3_text"):  # RMSNorm over each head
            q = norm(p + "self_attn.q_norm", q)
            k = norm(p + "self_attn.k_norm", k)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.view(T, KV, hd).transpose(0, 1)
        if use_rope[l]:
            cos, sin = tables[mt == "gemma3_text" and sliding[l]]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k = k.repeat_interleave(H // KV, dim=0)
        v = v.repeat_interleave(H // KV, dim=0)
        o = attend(q, k, v, scale, window if sliding[l] else None, attn_cap)
        o = lin(p + "self_attn.o_proj", o.transpose(0, 1).reshape(T, H * hd))
        if sandwich:
            x = x + norm(p + "post_attention_layernorm", o)
            h = norm(p + "pre_feedforward_layernorm", x)
        elif mt == "olmo2":
            x = x + norm(p + "post_attention_layernorm", o)
            h = x
        else:
            x = x + o
            h = norm(p + "post_attention_layernorm", x)
        if mt == "phi3":
            g, u = lin(p + "mlp.gate_up_proj", h).chunk(2, dim=-1)
        else:
            g, u = lin(p + "mlp.gate_proj", h), lin(p + "mlp.up_proj", h)
        act = gelu_tanh(g) if gemma else torch.nn.functional.silu(g)
        m = lin(p + "mlp.down_proj", act * u)
        if sandwich or mt == "olmo2":
            m = norm(p + "post_feedforward_layernorm", m)
        x = x + m
    x = norm("model.norm", x)
    head = w.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", gemma):
        head = w["model.embed_tokens.weight"]
    logits = x @ head.T
    if final_cap:
        logits = final_cap * torch.tanh(logits / final_cap)
    return logits


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


def forward(cfg, w, ids, lora=None):
    if cfg["model_type"] == "gpt2":
        if lora:
            raise ValueError("lora jobs are for the decoder families")
        return forward_gpt2(cfg, w, ids)
    if cfg["model_type"] in DECODERS:
        return forward_decoder(cfg, w, ids, lora)
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
    lora = None
    if job.get("lora"):
        lora = {"scale": job["lora"]["scale"], "adapters": {}}
        for name, ad in job["lora"]["adapters"].items():
            r = ad["r"]
            a = torch.tensor(ad["a"], dtype=torch.float32)
            b = torch.tensor(ad["b"], dtype=torch.float32)
            lora["adapters"][name] = {"a": a.view(r, -1).requires_grad_(True), "b": b.view(-1, r).requires_grad_(True)}
    logps = []
    with torch.enable_grad():
        loss = 0.0
        for seq, d in zip(job["seqs"], job["dlogp"]):
            logits = forward(cfg, params, seq, lora)
            lp = torch.log_softmax(logits[:-1] / T, dim=-1).gather(1, torch.tensor(seq[1:])[:, None])[:, 0]
            logps.append([0.0] + lp.tolist())
            loss = loss + (torch.tensor(d[1:], dtype=torch.float32) * lp).sum()
        loss.backward()
    out = {"logp": logps,
           "params": {k: (v.grad.flatten().tolist() if v.grad is not None else [0.0] * v.numel())
                      for k, v in params.items()}}
    if lora:
        out["lora"] = {n: {"a": ad["a"].grad.flatten().tolist(), "b": ad["b"].grad.flatten().tolist()}
                       for n, ad in lora["adapters"].items()}
    return out


def layout(cfg):
    """(name, shape, kind) of every tensor of a decoder-family model, kind one of linear,
    bias, norm, embed."""
    mt = cfg["model_type"]
    D, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = head_dim(cfg)
    bias = cfg.get("attention_bias", False) if mt in ("llama", "qwen3", "smollm3", "olmo2") + GEMMA else False
    out = [("model.embed_tokens.weight", [V, D], "embed")]

    def lin(name, o, i, b=False):
        out.append((name + ".weight", [o, i], "linear"))
        if b:
            out.append((name + ".bias", [o], "bias"))
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        if mt != "olmo2":
            out.append((p + "input_layernorm.weight", [D], "norm"))
        if mt == "phi3":
            lin(p + "self_attn.qkv_proj", (H + 2 * KV) * hd, D)
        else:
            lin(p + "self_attn.q_proj", H * hd, D, bias or mt == "qwen2")
            lin(p + "self_attn.k_proj", KV * hd, D, bias or mt == "qwen2")
            lin(p + "self_attn.v_proj", KV * hd, D, bias or mt == "qwen2")
        if mt in ("qwen3", "gemma3_text"):
            out.append((p + "self_attn.q_norm.weight", [hd], "norm"))
            out.append((p + "self_attn.k_norm.weight", [hd], "norm"))
        if mt == "olmo2":
            out.append((p + "self_attn.q_norm.weight", [H * hd], "norm"))
            out.append((p + "self_attn.k_norm.weight", [KV * hd], "norm"))
        lin(p + "self_attn.o_proj", D, H * hd, bias)
        out.append((p + "post_attention_layernorm.weight", [D], "norm"))
        if mt in SANDWICH:
            out.append((p + "pre_feedforward_layernorm.weight", [D], "norm"))
        if mt in SANDWICH or mt == "olmo2":
            out.append((p + "post_feedforward_layernorm.weight", [D], "norm"))
        mb = mt in ("llama", "smollm3") and cfg.get("mlp_bias", False)
        if mt == "phi3":
            lin(p + "mlp.gate_up_proj", 2 * F, D)
        else:
            lin(p + "mlp.gate_proj", F, D, mb)
            lin(p + "mlp.up_proj", F, D, mb)
        lin(p + "mlp.down_proj", D, F, mb)
    out.append(("model.norm.weight", [D], "norm"))
    if not cfg.get("tie_word_embeddings", mt in GEMMA):
        out.append(("lm_head.weight", [V, D], "linear"))
    return out


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, float32 numpy array), stored as F32 or BF16 (rounded to
    nearest even)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "BF16":
            bits = a.view(np.uint32).astype(np.uint64)
            b = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            b = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def make(spec):
    """A small random model of the config's family: matrices N(0, 0.15²), biases N(0, 0.1²),
    norm weights around 1 (gemma's (1 + w): w around 0)."""
    cfg = spec["config"]
    if cfg["model_type"] not in DECODERS:
        raise ValueError("make: model_type " + cfg["model_type"])
    rng = np.random.RandomState(spec.get("seed", 1))
    offset = 1.0 if cfg["model_type"] in GEMMA else 0.0
    tensors = []
    for name, shape, kind in layout(cfg):
        if kind == "norm":
            a = 1.0 - offset + 0.2 * rng.standard_normal(shape)
        elif kind == "bias":
            a = 0.1 * rng.standard_normal(shape)
        else:
            a = 0.15 * rng.standard_normal(shape)
        tensors.append((name, a.astype(np.float32)))
    os.makedirs(spec["dir"], exist_ok=True)
    with open(os.path.join(spec["dir"], "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_safetensors(os.path.join(spec["dir"], "model.safetensors"), tensors, spec.get("dtype", "F32"))


def main():
    req = json.load(sys.stdin)
    results = []
    for job in req["jobs"]:
        if "make" in job:
            make(job["make"])
            job.setdefault("model", job["make"]["dir"])
        r = {}
        if "model" in job and any(k in job for k in ("seqs", "greedy", "grad")):
            cfg, w = load(job["model"])
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
