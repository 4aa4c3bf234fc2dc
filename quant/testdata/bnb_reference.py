# Independent reference for quant: bitsandbytes' pure-PyTorch ("default" backend) 4-bit
# blockwise quantization, restated from its definition with torch ops:
#   absmax per block; scaled = clamp(x * (1/absmax), -1, 1); code = argmin |scaled - code book|;
#   two codes per byte, the even element in the high nibble, an odd length padded with a zero;
#   double quantization: offset = mean(absmax), 8-bit argmin over the dynamic code of
#   (absmax - offset) in blocks of 256; dequantization = code book[q] * absmax.
# usage: bnb_reference.py IN.bin DYNAMIC.bin OUT_DIR:QUANT_TYPE:BLOCKSIZE:DOUBLE(0|1)...
# IN.bin holds float32 values; DYNAMIC.bin the 256 float32 values of the 8-bit code.
import os
import sys

import numpy as np
import torch

NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
       -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
       0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
       0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
FP4 = [0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0]


def blockwise(x, bs):
    n = x.numel()
    nb = (n + bs - 1) // bs
    pad = torch.zeros(nb * bs - n, dtype=x.dtype)
    blocks = torch.cat([x, pad]).view(nb, bs)
    return blocks, n


def quantize(x, code, bs):
    blocks, n = blockwise(x, bs)
    absmax = blocks.abs().max(dim=1).values
    scaled = torch.clamp(blocks * (1 / absmax).view(-1, 1), -1, 1)
    q = torch.argmin((scaled.view(-1, 1) - code.view(1, -1)).abs(), dim=1)
    return q, absmax, n


def run(x, dyn, out, qtype, bs, double):
    bs = int(bs)
    code = torch.tensor(NF4 if qtype == "nf4" else FP4, dtype=torch.float32)
    if qtype == "fp4":
        code = code / 12.0
    q, absmax, n = quantize(x, code, bs)
    q = q[: n + (n % 2)]  # the pad of an odd length is the code of a zero in the last block
    packed = (q[0::2] << 4 | q[1::2]).to(torch.uint8)
    packed.numpy().tofile(os.path.join(out, "packed.bin"))
    absmax.numpy().tofile(os.path.join(out, "absmax.bin"))
    scale = absmax
    if double == "1":
        dcode = torch.from_numpy(np.fromfile(dyn, dtype=np.float32))
        offset = absmax.mean()
        q8, absmax2, nb = quantize(absmax - offset, dcode, 256)
        q8 = q8[:nb].to(torch.uint8)
        q8.numpy().tofile(os.path.join(out, "qabsmax.bin"))
        absmax2.numpy().tofile(os.path.join(out, "nested_absmax.bin"))
        offset.view(1).numpy().tofile(os.path.join(out, "offset.bin"))
        scale = (dcode[q8.long()].view(-1) * absmax2.repeat_interleave(256)[:nb]) + offset
    deq = (code[q[:n]].view(-1) * scale.repeat_interleave(bs)[:n])
    deq.numpy().tofile(os.path.join(out, "dequant.bin"))


def main():
    x = torch.from_numpy(np.fromfile(sys.argv[1], dtype=np.float32))
    for spec in sys.argv[3:]:
        run(x, sys.argv[2], *spec.split(":"))


main()
