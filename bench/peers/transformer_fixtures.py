#!/usr/bin/python3
"""Writes tests/nn/fixtures/transformer.safetensors: PyTorch's numbers for the transformer
building blocks, which tests/nn/transformer_fixture_test.cc compares pipewright against.

  /usr/bin/python3 bench/peers/transformer_fixtures.py [--out PATH]

Everything in float64, from fixed seeds, small shapes. For each layer: its parameters
("<case>.param.<name>", the layer's state-dict names, which pipewright's modules share), the
input ("<case>.x"), the output ("<case>.y"), a random upstream gradient ("<case>.dy"), and
the gradients of the input ("<case>.dx") and of every parameter ("<case>.grad.<name>") from
y.backward(dy). Then: clip_grad_norm_ (norms of order 2, 1 and inf and the clipped
gradients), the learning rates of the schedulers for 30 steps, and AdamW with two parameter
groups (decay on matrices only, nanoGPT's split) after 5 steps.

The attention and block are nanoGPT's modules (its manual attention path: torch 1.13 has no
scaled_dot_product_attention); RMSNorm is written out (torch 1.13 has no nn.RMSNorm), as
torch.nn.RMSNorm defines it. PyTorch is Debian's python3-torch, used here only: the tests
read the file and never import torch.
"""

import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from safetensors_io import save_safetensors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CausalSelfAttention(nn.Module):
    """nanoGPT's (model.py), manual attention path."""

    def __init__(self, dim, heads):
        super().__init__()
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, dim, hidden, approximate):
        super().__init__()
        self.c_fc = nn.Linear(dim, hidden)
        self.gelu = nn.GELU(approximate=approximate)
        self.c_proj = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, approximate="none"):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, 4 * dim, approximate)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class RMSNorm(nn.Module):
    """torch.nn.RMSNorm(dim, eps): x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def randomize(module, seed):
    """Every parameter uniform in [-1, 1) (so LayerNorm's ones and zeros are tested too)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=g, dtype=p.dtype) * 2 - 1)


def layer_case(out, name, module, x, seed):
    """Parameters, input, output and gradients of `module` at `x`."""
    g = torch.Generator().manual_seed(seed)
    for pname, p in module.named_parameters():
        out[f"{name}.param.{pname}"] = p.detach().clone()
    x = x.clone().requires_grad_(x.dtype.is_floating_point)
    y = module(x)
    dy = torch.rand(y.shape, generator=g, dtype=y.dtype) * 2 - 1
    y.backward(dy)
    out[f"{name}.x"] = x.detach()
    out[f"{name}.y"] = y.detach()
    out[f"{name}.dy"] = dy
    if x.requires_grad:
        out[f"{name}.dx"] = x.grad
    for pname, p in module.named_parameters():
        out[f"{name}.grad.{pname}"] = p.grad.clone()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out",
                        default=os.path.join(ROOT, "tests/nn/fixtures/transformer.safetensors"))
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    out = {}

    def rand(*shape, seed):
        g = torch.Generator().manual_seed(seed)
        return torch.rand(shape, generator=g) * 2 - 1

    emb = nn.Embedding(10, 4, padding_idx=2)
    randomize(emb, 1)
    layer_case(out, "embedding", emb, torch.tensor([[2, 5, 9], [0, 2, 5]]), 2)

    ln = nn.LayerNorm(6)
    randomize(ln, 3)
    layer_case(out, "layer_norm", ln, rand(2, 3, 6, seed=4) * 3, 5)

    rms = RMSNorm(6, 1e-6)
    randomize(rms, 6)
    layer_case(out, "rms_norm", rms, rand(2, 3, 6, seed=7) * 3, 8)

    layer_case(out, "gelu", nn.GELU(), rand(4, 5, seed=9) * 4, 10)
    layer_case(out, "gelu_tanh", nn.GELU(approximate="tanh"), rand(4, 5, seed=11) * 4, 12)

    lin = nn.Linear(6, 5)
    randomize(lin, 13)
    layer_case(out, "linear_3d", lin, rand(2, 3, 6, seed=14), 15)

    attn = CausalSelfAttention(8, 2)
    randomize(attn, 16)
    layer_case(out, "attention", attn, rand(2, 5, 8, seed=17), 18)

    block = Block(8, 2)
    randomize(block, 19)
    layer_case(out, "block", block, rand(2, 5, 8, seed=20), 21)

    # clip_grad_norm_: gradients of three parameters, norms of order 2, 1, inf, and the
    # gradients clipped to max_norm 0.5 (order 2).
    params = [nn.Parameter(rand(3, 4, seed=22)), nn.Parameter(rand(5, seed=23)),
              nn.Parameter(rand(2, 2, seed=24))]
    for i, p in enumerate(params):
        p.grad = rand(*p.shape, seed=30 + i) * 3
        out[f"clip.grad.{i}"] = p.grad.clone()
    for order, key in ((2.0, "2"), (1.0, "1"), (float("inf"), "inf")):
        out[f"clip.norm.{key}"] = torch.nn.utils.get_total_norm([p.grad for p in params], order) \
            if hasattr(torch.nn.utils, "get_total_norm") else \
            torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in params]), order)
    norm = torch.nn.utils.clip_grad_norm_(params, 0.5)
    out["clip.returned"] = norm.detach().reshape(())
    for i, p in enumerate(params):
        out[f"clip.clipped.{i}"] = p.grad.clone()

    # Learning rates of 30 optimizer steps (base lr 0.5).
    def lrs(make):
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.5)
        sched = make(opt)
        values = []
        for _ in range(30):
            values.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return torch.tensor(values)

    sched = torch.optim.lr_scheduler
    out["lr.warmup_cosine"] = lrs(lambda o: sched.SequentialLR(
        o, [sched.LinearLR(o, start_factor=1 / 5, end_factor=1.0, total_iters=4),
            sched.CosineAnnealingLR(o, T_max=20, eta_min=0.05)], milestones=[5]))
    out["lr.cosine"] = lrs(lambda o: sched.CosineAnnealingLR(o, T_max=25))
    out["lr.step"] = lrs(lambda o: sched.StepLR(o, step_size=7, gamma=0.3))
    out["lr.constant"] = lrs(lambda o: sched.ConstantLR(o))

    # AdamW, two groups: the matrix decays by 0.1, the vector not; 5 steps of fixed gradients.
    w, b = nn.Parameter(rand(3, 4, seed=40)), nn.Parameter(rand(4, seed=41))
    out["adamw.w0"], out["adamw.b0"] = w.detach().clone(), b.detach().clone()
    opt = torch.optim.AdamW([{"params": [w], "weight_decay": 0.1},
                             {"params": [b], "weight_decay": 0.0}], lr=0.05)
    for step in range(5):
        w.grad = rand(3, 4, seed=50 + step)
        b.grad = rand(4, seed=60 + step)
        out[f"adamw.grad_w.{step}"], out[f"adamw.grad_b.{step}"] = w.grad.clone(), b.grad.clone()
        opt.step()
    out["adamw.w5"], out["adamw.b5"] = w.detach().clone(), b.detach().clone()

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_safetensors(args.out, out)
    print(f"wrote {len(out)} tensors to {args.out}")


if __name__ == "__main__":
    main()
