#!/usr/bin/python3
"""Writes tests/tensor/fixtures/half.safetensors: PyTorch's bfloat16 and float16 conversions,
which tests/tensor/half_test.cc compares pipewright's (tensor/half.h) with, bit for bit.

  /usr/bin/python3 bench/peers/half_fixture.py [--out PATH]

"x": float32 values that probe the rounding (random bit patterns, values near every tie of
both formats, the overflow edges, subnormals, infinities, NaNs of both signs); "bf16" and
"f16": torch's x.to(torch.bfloat16) and x.to(torch.float16), stored as BF16 and F16; "x64":
float64 values with "bf16_of_x64", torch's conversion of them (through float32, as pipewright
converts). PyTorch is Debian's python3-torch, used here only: the test reads the file and never
imports torch.
"""

import argparse
import os

import torch

from safetensors_io import save_safetensors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def probes():
    g = torch.Generator().manual_seed(7)
    bits = torch.randint(-2**31, 2**31, (4000,), generator=g, dtype=torch.int64)
    random = bits.to(torch.int32).view(torch.float32)
    values = []
    # Ties and their neighbours: midpoints between consecutive values of each format.
    for fmt in (torch.bfloat16, torch.float16):
        h = torch.arange(0, 0x7C00 if fmt == torch.float16 else 0x7F80, 37, dtype=torch.int32)
        lo = h.to(torch.int16).view(fmt).float()
        hi = (h + 1).to(torch.int16).view(fmt).float()
        mid = ((lo.double() + hi.double()) / 2).float()
        values += [mid, torch.nextafter(mid, torch.zeros_like(mid)),
                   torch.nextafter(mid, torch.full_like(mid, float("inf")))]
    edges = torch.tensor([0.0, -0.0, 65504.0, 65519.996, 65520.0, 65536.0, 1e-8, 2.9802322e-8,
                          6e-8, 1e-45, 3.3961775e38, 3.4028235e38, float("inf"), float("-inf"),
                          float("nan"), -float("nan")], dtype=torch.float32)
    ties = torch.cat(values)
    return torch.cat([random, ties, -ties, edges, -edges])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(ROOT, "tests/tensor/fixtures/half.safetensors"))
    args = parser.parse_args()
    x = probes()
    x64 = torch.tensor([1.0 + 2**-9 + 2**-40, 1.0 + 2**-8, -3.0000000001, 1e300, 2.0**-140],
                       dtype=torch.float64)
    tensors = {"x": x, "bf16": x.to(torch.bfloat16), "f16": x.to(torch.float16),
               "x64": x64, "bf16_of_x64": x64.to(torch.bfloat16)}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_safetensors(args.out, tensors)
    print(f"wrote {args.out}: {x.numel()} float32 values, torch {torch.__version__}")


if __name__ == "__main__":
    main()
