#!/usr/bin/python3
"""PyTorch eager peer of bench/transformer_bench.cc: one TransformerBlock (nanoGPT's Block:
pre-LayerNorm, causal self-attention, GELU MLP 4x) and its attention alone, forward + backward
on the CPU, float32, B=16 T=128 C=256 4 heads, as pipewright runs them.

  /usr/bin/python3 bench/peers/torch_transformer_block.py [--threads 2] [--iters 20]

The attention is nanoGPT's manual path (q·kᵀ/√d, masked_fill(-inf), softmax, ·v): Debian's
torch 1.13 has no scaled_dot_product_attention. Each iteration: zero the gradients, forward,
backward from a fixed random gradient (the input requires grad, as a pipeline stage's does).
Prints one line per subject: `RESULT subject=block ms=<median ms per iteration> min=<ms>`.
Run by bench/peers/transformer_compare.py side by side with ours.
"""

import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, C, H = 16, 128, 256, 4


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, H, c // H).transpose(1, 2)
        k = k.view(b, t, H, c // H).transpose(1, 2)
        v = v.view(b, t, H, c // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = F.softmax(att.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def measure(module, iters):
    x = torch.randn(B, T, C, requires_grad=True)
    g = torch.randn(B, T, C)
    times = []
    for i in range(iters + 3):  # 3 warm-up iterations
        start = time.perf_counter()
        module.zero_grad(set_to_none=True)
        x.grad = None
        module(x).backward(g)
        if i >= 3:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for subject, module in (("block", Block()), ("attention", CausalSelfAttention())):
        median, best = measure(module, args.iters)
        print(f"RESULT subject={subject} ms={median:.3f} min={best:.3f}", flush=True)


if __name__ == "__main__":
    main()
