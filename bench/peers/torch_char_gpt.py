#!/usr/bin/python3
"""The character-level GPT (examples/char_gpt) in PyTorch, eagerly: the peer its loss and
speed are measured against.

Same model, data, batches and learning rates as `tools/bazel run //examples:char_gpt`:
  - data: every file of /usr/share/games/fortunes (Debian's fortunes) without a '.' in its
    name, in name order, concatenated; the vocabulary its distinct bytes, sorted; the first 90 %
    the training split, the rest validation; step s takes window i starting at
    splitmix64(seed + 0x9E3779B97F4A7C15 * (s * 2^20 + i + 1)) mod (n - context)
    (data/char_corpus.h), so both programs see the same windows in the same order;
  - model: token + learned position embeddings, L pre-LN blocks (nanoGPT's Block: exact GELU,
    causal attention with the manual softmax path, as torch 1.13 has no
    scaled_dot_product_attention), final LayerNorm, LM head tied to the token embedding;
    nanoGPT's initialisation (N(0, 0.02), residual projections N(0, 0.02 / sqrt(2L)));
  - AdamW (betas 0.9 / 0.99, weight decay on matrices only), linear warmup then cosine to
    min_lr_ratio * lr (pipewright's nn::WarmupCosineLR), gradients clipped to norm 1.0;
  - validation: the mean loss on the same fixed windows (seed 1, batch-size windows per step).
The initial weights are drawn by torch's generator, not pipewright's: the same distributions,
other numbers.

  /usr/bin/python3 bench/peers/torch_char_gpt.py [--steps 600] [--threads 2] [...]

Prints a report every --eval-every steps in the format of ours and finally
`RESULT val_loss=... tokens_per_s=... step_ms=... peak_mib=... params=...` (tokens over the
training steps' time, evaluation and --untimed-steps excluded; peak_mib: CUDA's peak allocated
memory, 0 on the CPU). On a card (tools/gpu/check.sh, step gpt2): --device cuda --precision
fp32|tf32|bf16 (torch.autocast) --attention sdpa (F.scaled_dot_product_attention). PyTorch is Debian's python3-torch; it is never a dependency of pipewright. The
defaults are the example's (tools/bazel run //examples:char_gpt); docs/BENCHMARKS.md shows
both side by side.
"""

import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CORPUS = "/usr/share/games/fortunes"
MASK = (1 << 64) - 1


def read_corpus(directory):
    names = sorted(n for n in os.listdir(directory)
                   if "." not in n and os.path.isfile(os.path.join(directory, n))
                   and not os.path.islink(os.path.join(directory, n)))
    text = b"".join(open(os.path.join(directory, n), "rb").read() for n in names)
    vocab = sorted(set(text))
    index = {b: i for i, b in enumerate(vocab)}
    tokens = torch.tensor([index[b] for b in text], dtype=torch.long)
    n_train = int(len(text) * 0.9)
    return bytes(vocab), tokens[:n_train], tokens[n_train:]


def splitmix64(x):
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def window_batch(tokens, step, batch, context, seed):
    n = len(tokens)
    starts = [splitmix64((seed + 0x9E3779B97F4A7C15 * (step * (1 << 20) + i + 1)) & MASK)
              % (n - context) for i in range(batch)]
    x = torch.stack([tokens[s:s + context] for s in starts])
    y = torch.stack([tokens[s + 1:s + context + 1] for s in starts])
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, dropout, sdpa):
        super().__init__()
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.heads = heads
        self.dropout = dropout
        self.sdpa = sdpa

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:  # torch >= 2.0: the fused (flash / memory-efficient) kernels
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = self.attn_dropout(att) @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class MLP(nn.Module):
    def __init__(self, dim, dropout):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, dim, heads, dropout, sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, dropout, sdpa)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, dim, heads, layers, dropout, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout, sdpa) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        t = idx.size(1)
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(t, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def lr_at(step, lr, warmup, steps, min_lr):
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= steps:
        return min_lr
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup))) / 2


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-windows", type=int, default=64)
    p.add_argument("--final-eval-windows", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data-dir", default=CORPUS)
    # The card baseline (issue 41; tools/gpu/check.sh's gpt2 step): where, in which precision,
    # which attention, and how many first steps to leave out of the timing.
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda:0)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                   help="fp32; tf32 (float32 matmuls on tensor cores); bf16 (torch.autocast)")
    p.add_argument("--attention", default="manual", choices=["manual", "sdpa"],
                   help="manual softmax path, or F.scaled_dot_product_attention (torch >= 2.0)")
    p.add_argument("--untimed-steps", type=int, default=0,
                   help="first steps left out of tokens/s (CUDA start-up, autotuning)")
    a = p.parse_args()
    if a.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit(f"--attention sdpa needs torch >= 2.0 (this is {torch.__version__})")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                              enabled=a.precision == "bf16")

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    vocab, train, val = read_corpus(a.data_dir)
    model = GPT(len(vocab), a.context, a.dim, a.heads, a.layers, a.dropout,
                a.attention == "sdpa").to(device)
    params = list(model.parameters())  # the tied matrix once
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    print(f"model: {sum(q.numel() for q in params):,} parameters | data: {len(train):,} train / "
          f"{len(val):,} validation characters (vocabulary {len(vocab)}) | torch "
          f"{torch.__version__}, {a.threads} threads", flush=True)

    def val_loss(windows):
        model.eval()
        total, count, k = 0.0, 0, 0
        with torch.no_grad():
            while count < windows:
                n = min(a.batch_size, windows - count)
                x, y = window_batch(val, k, n, a.context, 1)
                x, y = x.to(device), y.to(device)
                with autocast():
                    logits = model(x)
                total += F.cross_entropy(logits.float().view(-1, len(vocab)), y.view(-1)).item() * n
                count += n
                k += 1
        model.train()
        return total / count

    loss_sum, seconds, since, total_seconds, timed_steps = 0.0, 0.0, 0, 0.0, 0
    for step in range(a.steps):
        synchronize()
        start = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, a.lr, a.warmup, a.steps, a.min_lr_ratio * a.lr)
        x, y = window_batch(train, step, a.batch_size, a.context, a.seed)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast():
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, len(vocab)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        opt.step()
        loss_sum += loss.item()  # waits for the step
        if step >= a.untimed_steps:
            seconds += time.perf_counter() - start
            timed_steps += 1
        since += 1
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            v = val_loss(a.eval_windows)
            rate = since * a.batch_size * a.context / seconds if seconds > 0 else 0.0
            print(f"step {step + 1}/{a.steps}: train loss {loss_sum / since:.4f} "
                  f"({loss_sum / since / math.log(2):.3f} bits/char) | val loss {v:.4f} "
                  f"({v / math.log(2):.3f} bits/char) | {seconds:.1f} s | {rate:,.0f} tokens/s",
                  flush=True)
            total_seconds += seconds
            loss_sum, seconds, since = 0.0, 0.0, 0
    final = val_loss(a.final_eval_windows)
    rate = timed_steps * a.batch_size * a.context / total_seconds if total_seconds > 0 else 0.0
    print(f"final: val loss {final:.4f} ({final / math.log(2):.3f} bits/char) on "
          f"{a.final_eval_windows} windows of {a.context} characters")
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else 0.0
    step_ms = 1000 * total_seconds / timed_steps if timed_steps else 0.0
    print(f"RESULT val_loss={final:.4f} tokens_per_s={rate:.0f} step_ms={step_ms:.2f} "
          f"peak_mib={peak:.0f} params={sum(q.numel() for q in params)} "
          f"precision={a.precision} attention={a.attention}")


if __name__ == "__main__":
    main()
