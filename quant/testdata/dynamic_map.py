# Prints bitsandbytes' signed dynamic 8-bit code (create_dynamic_map(signed=True,
# max_exponent_bits=7, total_bits=8)) as PyTorch computes it, one float32 bit pattern (hex) a
# line, sorted. The formula, restated from bitsandbytes' definition: for i = 0..6 take the
# midpoints of torch.linspace(0.1, 1, 2**i + 1), scale them by +-10**(i-6), add 0 and 1, sort.
import struct
import torch

values = []
for i in range(7):
    edges = torch.linspace(0.1, 1, 2 ** i + 1)
    mids = (edges[:-1] + edges[1:]) / 2.0
    values += ((10 ** (i - 6)) * mids).tolist()
    values += (-(10 ** (i - 6)) * mids).tolist()
values += [0.0, 1.0]
assert len(values) == 256
code = torch.tensor(sorted(values), dtype=torch.float32)
for v in code.tolist():
    print("%08x" % struct.unpack("<I", struct.pack("<f", v))[0])
