"""One GRPO step in plain PyTorch on the CPU: the comparison for engine/bench_test.go's
BenchmarkGRPOStep (see README.md beside this file).

The step does the same work as the Go benchmark, written the way a careful PyTorch user would
write it without transformers:

  rollout   batched sampling with a key/value cache (prefill of the prompts, then one decode
            step per new token, logits of the last position only, temperature 1, no stop token)
            with the adapters on;
  scoring   one batched forward with the adapters off (reference log-probs of every position);
  loss      forward with autograd (the base frozen, LoRA's A and B trainable), log_softmax,
            per-token entropy, DESIGN section 5's loss (dapo, beta 0.04, group advantages),
            backward into the LoRA parameters only;
  update    clip_grad_norm_(1.0) and torch.optim.AdamW.

A llama-family model (RMSNorm, RoPE rotate-half, SwiGLU, grouped-query attention, tied
embeddings; q/k/v biases as qwen2 has with qkv_bias) with random weights, fp32, LoRA r 16 (alpha 32) on every linear but the head.

  /usr/bin/python3 bench/grpo_step.py --preset 25m [--steps 1] [--warmup 1] [--threads 2]
  /usr/bin/python3 bench/grpo_step.py --shape '{"vocab": 2048, "dim": 192, ...}'

prints one JSON document: the mean seconds of each phase over the timed steps, the step's
seconds and tokens/s (prompt + completion tokens of all sequences / step seconds).
"""
import argparse
import json
import math
import os
import sys
import time

# Threads, settled before torch loads. Debian's torch runs its element-wise ops on OpenMP and
# its GEMMs on OpenBLAS's own pthread pool; left alone, both pools spin-wait for work, and on
# two shared cores the spinning pools take the cores from each other (a step measured 5-10x
# slower). So: OpenBLAS gets the same thread count as torch, and OpenMP threads sleep when
# idle. Either can be overridden from the environment.
_threads = argparse.ArgumentParser(add_help=False)
_threads.add_argument("--threads", type=int, default=2)
THREADS = _threads.parse_known_args(sys.argv[1:])[0].threads
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PRESETS = {
    # The fallback shape of the built-in model (when engine/builtin/model is absent).
    "builtin": {"vocab": 2048, "dim": 192, "layers": 4, "heads": 6, "kv_heads": 2, "hidden": 512},
    # About 25M parameters (29M with the tied 8192×512 embedding).
    "25m": {"vocab": 8192, "dim": 512, "layers": 8, "heads": 8, "kv_heads": 4, "hidden": 1536},
    # Qwen2.5-0.5B's shape: q/k/v biases, tied head (494M parameters; run it with --prompts 1).
    "qwen05b": {"vocab": 151936, "dim": 896, "layers": 24, "heads": 14, "kv_heads": 2, "hidden": 4864,
                "qkv_bias": True, "rope_theta": 1e6, "norm_eps": 1e-6},
}


class Model:
    """Random llama weights, fp32, frozen; LoRA A, B trainable on every linear."""

    def __init__(self, s, r, alpha, gen):
        D, V, F_ = s["dim"], s["vocab"], s["hidden"]
        self.H, self.KV = s["heads"], s["kv_heads"]
        self.hd = s.get("head_dim") or D // self.H
        self.eps = s.get("norm_eps", 1e-5)
        self.scale = alpha / r
        qd, kvd = self.H * self.hd, self.KV * self.hd

        def w(o, i):
            return torch.randn(o, i, generator=gen) * 0.02

        self.embed = torch.randn(V, D, generator=gen) * 0.02
        self.head = self.embed if s.get("tie", True) else w(V, D)
        self.norm = torch.ones(D)
        self.layers = []
        self.lora = []
        for _ in range(s["layers"]):
            L = {"n1": torch.ones(D), "n2": torch.ones(D)}
            for name, o, i in (("q", qd, D), ("k", kvd, D), ("v", kvd, D), ("o", D, qd),
                               ("gate", F_, D), ("up", F_, D), ("down", D, F_)):
                L[name] = w(o, i)
                if s.get("qkv_bias") and name in ("q", "k", "v"):
                    L[name + ".bias"] = torch.zeros(o)  # zeros, as the Go side's random model
                bound = 1 / math.sqrt(i)  # PEFT: A Kaiming-uniform(a=sqrt 5), B zeros
                a = ((torch.rand(r, i, generator=gen) * 2 - 1) * bound).requires_grad_(True)
                b = torch.zeros(o, r).requires_grad_(True)
                L[name + ".lora"] = (a, b)
                self.lora += [a, b]
            self.layers.append(L)
        half = self.hd // 2
        theta = s.get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, half, dtype=torch.float64) * 2 / self.hd))

    def params(self):
        return self.lora

    def rope(self, positions):
        f = positions.double()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((f, f), dim=-1)
        return emb.cos().float(), emb.sin().float()

    def lin(self, L, name, x, adapters):
        y = x @ L[name].T
        if name + ".bias" in L:
            y = y + L[name + ".bias"]
        if adapters:
            a, b = L[name + ".lora"]
            y = y + ((x @ a.T) @ b.T) * self.scale
        return y

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def forward(self, ids, adapters, cache=None, start=0, last_only=False):
        """ids [B, T] from position start; cache: per-layer (K, V) [B, KV, cap, hd] filled in
        place. Returns logits [B, T, V] (or [B, V] with last_only)."""
        B, T = ids.shape
        H, KV, hd = self.H, self.KV, self.hd
        x = self.embed[ids]
        cos, sin = self.rope(torch.arange(start, start + T))
        end = start + T
        mask = None
        if T > 1:
            mask = torch.ones(T, end, dtype=torch.bool).triu(start + 1)  # key j > query i: hidden

        def rot(t):
            h = t.shape[-1] // 2
            return t * cos + torch.cat((-t[..., h:], t[..., :h]), dim=-1) * sin

        for li, L in enumerate(self.layers):
            h = self.rms(x, L["n1"])
            q = self.lin(L, "q", h, adapters).view(B, T, H, hd).transpose(1, 2)
            k = self.lin(L, "k", h, adapters).view(B, T, KV, hd).transpose(1, 2)
            v = self.lin(L, "v", h, adapters).view(B, T, KV, hd).transpose(1, 2)
            q, k = rot(q), rot(k)
            if cache is not None:
                ck, cv = cache[li]
                ck[:, :, start:end] = k
                cv[:, :, start:end] = v
                k, v = ck[:, :, :end], cv[:, :, :end]
            # Grouped-query attention without repeating K and V: queries grouped per KV head.
            qg = q.reshape(B, KV, H // KV * T, hd)
            s = (qg @ k.transpose(-1, -2)).view(B, KV, H // KV, T, end) * (1 / math.sqrt(hd))
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            p = torch.softmax(s, dim=-1).view(B, KV, H // KV * T, end)
            o = (p @ v).view(B, H, T, hd).transpose(1, 2).reshape(B, T, H * hd)
            x = x + self.lin(L, "o", o, adapters)
            h = self.rms(x, L["n2"])
            g = self.lin(L, "gate", h, adapters)
            u = self.lin(L, "up", h, adapters)
            x = x + self.lin(L, "down", F.silu(g) * u, adapters)
        if last_only:
            x = x[:, -1]
        return self.rms(x, self.norm) @ self.head.T


def generate(m, prompts, new, gen):
    """Sampling at temperature 1 with a KV cache; every sequence gets exactly `new` tokens."""
    B, P = prompts.shape
    cap = P + new
    cache = [(torch.zeros(B, m.KV, cap, m.hd), torch.zeros(B, m.KV, cap, m.hd)) for _ in m.layers]
    out = torch.empty(B, new, dtype=torch.long)
    old_logp = torch.empty(B, new)
    with torch.no_grad():
        logits = m.forward(prompts, True, cache, 0, last_only=True)
        for t in range(new):
            logp = torch.log_softmax(logits, dim=-1)
            tok = torch.multinomial(logp.exp(), 1, generator=gen)
            out[:, t] = tok[:, 0]
            old_logp[:, t] = logp.gather(1, tok)[:, 0]
            if t + 1 < new:
                logits = m.forward(tok, True, cache, P + t, last_only=True)
    return out, old_logp


def token_logps(logits, seqs):
    """log p(seq[i] | seq[<i]) for i >= 1 and the entropy of each of those distributions."""
    lp = torch.log_softmax(logits[:, :-1], dim=-1)
    chosen = lp.gather(2, seqs[:, 1:, None])[..., 0]
    with torch.no_grad():
        ent = -(lp.exp() * lp).sum(-1)
    return chosen, ent


def advantages(rewards, g):
    r = rewards.view(-1, g)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).reshape(-1)


def step(m, opt, prompts, new, gen, beta=0.04, eps=0.2):
    B, P = prompts.shape
    t0 = time.perf_counter()
    comp, _ = generate(m, prompts, new, gen)
    t1 = time.perf_counter()
    seqs = torch.cat((prompts, comp), dim=1)
    with torch.no_grad():
        ref, _ = token_logps(m.forward(seqs, False), seqs)
    ref = ref[:, P - 1:]
    t2 = time.perf_counter()
    rewards = (comp % 2 == 0).float().mean(1)  # the Go benchmark's reward: share of even ids
    adv = advantages(rewards, G)[:, None]
    opt.zero_grad(set_to_none=False)
    logp, ent = token_logps(m.forward(seqs, True), seqs)
    logp = logp[:, P - 1:]
    ratio = torch.exp(logp - logp.detach())
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)
    d = ref - logp
    per_token = per_token + beta * (torch.exp(d) - d - 1)
    loss = per_token.sum() / per_token.numel()  # dapo over one micro-batch
    loss.backward()
    t3 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(m.params(), 1.0)
    opt.step()
    t4 = time.perf_counter()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


G = 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="25m")
    ap.add_argument("--shape", help="JSON model shape (vocab, dim, layers, heads, kv_heads, hidden, …)")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1, help="timed steps (their mean is reported)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (and OpenBLAS's threads)")
    args = ap.parse_args()
    global G
    G = args.generations
    torch.set_num_threads(args.threads)
    shape = json.loads(args.shape) if args.shape else PRESETS[args.preset]
    gen = torch.Generator().manual_seed(1)
    m = Model(shape, 16, 32, gen)
    n_params = m.embed.numel() + sum(t.numel() for L in m.layers for k, t in L.items() if not k.endswith(".lora"))
    n_params += m.norm.numel() + (0 if m.head is m.embed else m.head.numel())
    opt = torch.optim.AdamW(m.params(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    base = torch.randint(0, shape["vocab"], (args.prompts, args.prompt_len), generator=gen)
    prompts = base.repeat_interleave(G, dim=0)
    for _ in range(args.warmup):
        step(m, opt, prompts, args.new, gen)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    times = [step(m, opt, prompts, args.new, gen) for _ in range(args.steps)]
    cpu = (time.process_time() - cpu0) / args.steps
    wall = (time.perf_counter() - wall0) / args.steps
    phases = [sum(t[i] for t in times) / len(times) for i in range(4)]
    total = sum(phases)
    tokens = prompts.shape[0] * (args.prompt_len + args.new)
    print(json.dumps({
        "shape": shape, "params": n_params, "lora_params": sum(p.numel() for p in m.params()),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "env": {k: os.environ[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY")}, "steps": args.steps,
        "tokens": tokens, "rollout_s": phases[0], "scoring_s": phases[1], "loss_backward_s": phases[2],
        "update_s": phases[3], "step_s": total, "tokens_per_s": tokens / total,
        # CPU seconds of the process per step (all its threads), and the share of the wall
        # time it got: on a loaded machine, how much of the cores the step actually had.
        "cpu_s": cpu, "cpu_share": cpu / wall}))


if __name__ == "__main__":
    main()
