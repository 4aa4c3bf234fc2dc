#!/usr/bin/env python3
"""Writes a GGUF file of Qwen2.5-0.5B's shape with random weights, for llama.cpp's timing
beside ours (bench/llamacpp_anchor.sh).

GGUF (version 3) as its specification documents it: the magic "GGUF", the version, the tensor
and key counts, the key/value pairs (a string key, a type, a value), the tensor descriptions
(name, dimensions innermost first, type, offset into the data), then the data, each tensor
aligned to general.alignment (32). The weights are F16 (type 1), norms F32 (type 0); llama.cpp's
own quantizer then makes the Q4_0 file, with the recipe it gives its Q4_0 models.

The vocabulary is synthetic (the timing feeds token ids, never text): a SentencePiece-style
list of <unk>, <s>, </s>, the 256 byte tokens and numbered pieces, 151,936 in all.

usage: gguf_qwen05.py OUT.gguf [--layers 24]
"""
import argparse
import struct

import numpy as np

VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HIDDEN = 151936, 896, 24, 14, 2, 4864
HEAD_DIM = DIM // HEADS

# GGUF value types
U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, value):
    out = gguf_string(key) + struct.pack("<I", typ)
    if typ == STRING:
        return out + gguf_string(value)
    if typ == U32:
        return out + struct.pack("<I", value)
    if typ == F32:
        return out + struct.pack("<f", value)
    if typ == BOOL:
        return out + struct.pack("<?", value)
    raise ValueError(typ)


def kv_array(key, elem, values):
    out = gguf_string(key) + struct.pack("<IIQ", ARRAY, elem, len(values))
    if elem == STRING:
        return out + b"".join(gguf_string(v) for v in values)
    if elem == I32:
        return out + np.asarray(values, dtype="<i4").tobytes()
    if elem == F32:
        return out + np.asarray(values, dtype="<f4").tobytes()
    raise ValueError(elem)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=LAYERS)
    a = ap.parse_args()
    rng = np.random.default_rng(1)

    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    tokens += ["\u2581t%d" % i for i in range(VOCAB - len(tokens))]
    types += [1] * (VOCAB - len(types))
    scores = -np.arange(VOCAB, dtype=np.float32)

    arch = "qwen2"
    kvs = [
        kv("general.architecture", STRING, arch),
        kv("general.name", STRING, "random qwen2.5-0.5b shape"),
        kv("general.file_type", U32, 1),  # mostly F16
        kv(arch + ".context_length", U32, 32768),
        kv(arch + ".embedding_length", U32, DIM),
        kv(arch + ".block_count", U32, a.layers),
        kv(arch + ".feed_forward_length", U32, HIDDEN),
        kv(arch + ".attention.head_count", U32, HEADS),
        kv(arch + ".attention.head_count_kv", U32, KV_HEADS),
        kv(arch + ".rope.freq_base", F32, 1e6),
        kv(arch + ".attention.layer_norm_rms_epsilon", F32, 1e-6),
        kv("tokenizer.ggml.model", STRING, "llama"),
        kv_array("tokenizer.ggml.tokens", STRING, tokens),
        kv_array("tokenizer.ggml.scores", F32, scores),
        kv_array("tokenizer.ggml.token_type", I32, types),
        kv("tokenizer.ggml.bos_token_id", U32, 1),
        kv("tokenizer.ggml.eos_token_id", U32, 2),
        kv("tokenizer.ggml.unknown_token_id", U32, 0),
    ]

    # (name, shape as [out, in] or [n], f16?)
    specs = [("token_embd.weight", (VOCAB, DIM), True), ("output_norm.weight", (DIM,), False)]
    kvd = KV_HEADS * HEAD_DIM
    for l in range(a.layers):
        p = "blk.%d." % l
        specs += [
            (p + "attn_norm.weight", (DIM,), False),
            (p + "attn_q.weight", (DIM, DIM), True), (p + "attn_q.bias", (DIM,), False),
            (p + "attn_k.weight", (kvd, DIM), True), (p + "attn_k.bias", (kvd,), False),
            (p + "attn_v.weight", (kvd, DIM), True), (p + "attn_v.bias", (kvd,), False),
            (p + "attn_output.weight", (DIM, DIM), True),
            (p + "ffn_norm.weight", (DIM,), False),
            (p + "ffn_gate.weight", (HIDDEN, DIM), True),
            (p + "ffn_up.weight", (HIDDEN, DIM), True),
            (p + "ffn_down.weight", (DIM, HIDDEN), True),
        ]

    align = 32
    infos, offset = [], 0
    for name, shape, f16 in specs:
        n = int(np.prod(shape))
        size = n * (2 if f16 else 4)
        dims = list(reversed(shape))  # innermost first
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
                     + struct.pack("<IQ", 1 if f16 else 0, offset))
        offset += (size + align - 1) // align * align

    with open(a.out, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(specs), len(kvs)))
        for x in kvs:
            f.write(x)
        for x in infos:
            f.write(x)
        pad = (-f.tell()) % align
        f.write(b"\0" * pad)
        for name, shape, f16 in specs:
            n = int(np.prod(shape))
            if f16:
                v = (rng.standard_normal(n, dtype=np.float32) * 0.02).astype("<f2")
            elif name.endswith("norm.weight"):
                v = np.ones(n, dtype="<f4")
            else:
                v = (rng.standard_normal(n, dtype=np.float32) * 0.02).astype("<f4")
            b = v.tobytes()
            f.write(b)
            f.write(b"\0" * ((-len(b)) % align))


if __name__ == "__main__":
    main()
