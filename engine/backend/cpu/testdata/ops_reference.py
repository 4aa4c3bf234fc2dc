"""Independent PyTorch (fp32, autograd) reference for the CPU ops of package cpu.

stdin:  {"cases": [{"op": NAME, "inputs": {name: {"shape": [...], "data": [...]}},
                    "attrs": {...}, "dout": [...], "diff": [names]}]}
stdout: {"results": [{"out": [...], "grads": {name: [...]}}]}

out is the op's forward output, flattened; grads[name] is d(sum(dout * out))/d input.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def op_matmul(t, a):
    y = t["x"] @ t["w"].T
    return y + t["b"] if "b" in t else y


def op_layernorm(t, a):
    return F.layer_norm(t["x"], (t["x"].shape[-1],), t["w"], t["b"], a["eps"])


def op_rmsnorm(t, a):
    x = t["x"]
    return (a.get("offset", 0) + t["w"]) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a["eps"]))


def op_embedding(t, a):
    ids, pos = torch.tensor(a["ids"]), torch.tensor(a["pos"])
    return t["wte"][ids] + t["wpe"][pos]


def op_rope(t, a):
    x = t["x"]
    R = x.shape[0]
    inv = torch.tensor(a["inv_freq"], dtype=torch.float64)
    ang = torch.tensor(a["pos"], dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos().float()[:, None, :], emb.sin().float()[:, None, :]
    rot = 2 * len(a["inv_freq"])
    xh = x.view(R, -1, a.get("head_dim", rot))  # dimensions past rot pass through (partial rotary)
    xr, xp = xh[..., :rot], xh[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1).reshape(R, -1)


def op_attention(t, a):
    H, KV, hd, window = a["heads"], a["kv_heads"], a["head_dim"], a.get("window", 0)
    q, k, v = t["q"], t["k"], t["v"]
    outs = []
    for start, n in a["spans"]:
        qs = q[start:start + n].view(n, H, hd).transpose(0, 1)
        ks = k[start:start + n].view(n, KV, hd).transpose(0, 1).repeat_interleave(H // KV, dim=0)
        vs = v[start:start + n].view(n, KV, hd).transpose(0, 1).repeat_interleave(H // KV, dim=0)
        s = (qs @ ks.transpose(1, 2)) / math.sqrt(hd)
        if a.get("softcap"):
            s = a["softcap"] * torch.tanh(s / a["softcap"])
        i = torch.arange(n)[:, None]
        j = torch.arange(n)[None, :]
        mask = j > i
        if window:
            mask = mask | (j <= i - window)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        outs.append((p @ vs).transpose(0, 1).reshape(n, H * hd))
    return torch.cat(outs, dim=0)


def op_gelu(t, a):
    x = t["x"]
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def op_swiglu(t, a):
    return F.silu(t["gate"]) * t["up"]


def op_geglu(t, a):
    return op_gelu({"x": t["gate"]}, a) * t["up"]


def op_softcap(t, a):
    return a["cap"] * torch.tanh(t["x"] / a["cap"])


def op_head_logprob(t, a):
    logits = t["h"] @ t["w"].T
    if a.get("softcap"):
        logits = a["softcap"] * torch.tanh(logits / a["softcap"])
    lp = torch.log_softmax(logits * a["inv_temp"], dim=-1)
    tg = torch.tensor(a["targets"])
    return torch.where(tg >= 0, lp.gather(1, tg.clamp(min=0)[:, None])[:, 0], torch.zeros(len(tg)))


def op_residual(t, a):
    return t["a"] + t["b"]


def op_logprob(t, a):
    lp = torch.log_softmax(t["logits"] * a["inv_temp"], dim=-1)
    return lp.gather(1, torch.tensor(a["targets"])[:, None])[:, 0]


def op_entropy(t, a):
    lp = torch.log_softmax(t["logits"] * a["inv_temp"], dim=-1)
    return -(lp.exp() * lp).sum(-1)


def main():
    req = json.load(sys.stdin)
    results = []
    for c in req["cases"]:
        tens = {}
        for name, spec in c["inputs"].items():
            x = torch.tensor(spec["data"], dtype=torch.float32).view(spec["shape"])
            tens[name] = x.requires_grad_(name in c["diff"])
        out = globals()["op_" + c["op"]](tens, c.get("attrs", {}))
        dout = torch.tensor(c["dout"], dtype=torch.float32).view(out.shape)
        if c["diff"]:
            (out * dout).sum().backward()
        results.append({"out": out.detach().flatten().tolist(),
                        "grads": {n: tens[n].grad.flatten().tolist() for n in c["diff"]}})
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()
