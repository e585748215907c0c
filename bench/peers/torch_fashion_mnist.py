#!/usr/bin/python3
"""The main job (examples/fashion_mnist) in PyTorch: the peer every speed claim is measured against.

Same model, data and settings as `tools/bazel run //examples:fashion_mnist`:
784-512-512-10 MLP (Linear, BatchNorm1d, ReLU, Dropout 0.2 per hidden layer), Fashion-MNIST
from Debian's dataset-fashion-mnist normalised with mean 0.2860 / std 0.3530, batch 256
reshuffled every epoch, Adam (lr 1e-3) with a per-step cosine learning rate to 0, cross-entropy.

  --mode eager   the plain model, torch.set_num_threads(--threads) (default 2, as ours uses
                 both cores)
  --mode pipe    torch.distributed.pipeline.sync.Pipe (the seed system) with the same cut as
                 ours (--balance 4,5: each Linear with its BatchNorm, ReLU and Dropout, as
                 pipeline::balance_by_parameters cuts it),
                 --chunks 4, checkpoint 'never' (ours: --checkpoint never)

  --mode graph   (cuda only) the whole step — forward, backward, Adam(capturable=True) with the
                 learning rate a device tensor — captured once with torch.cuda.graph after
                 three eager warm-up steps and replayed (PyTorch's recipe for whole-network
                 capture), the peer of ours with --cuda-graphs; full batches only (the last,
                 smaller batch of an epoch is dropped: a graph has static shapes)

  --device cuda  (eager and graph) the model on the GPU, as ours with --devices cuda:0: the data set
                 stays on the CPU, each mini-batch is gathered there and copied to the GPU;
                 full FP32 matrix products (PyTorch's default: torch.backends.cuda.matmul.
                 allow_tf32 is False); run by tools/gpu/check.sh on the same card as ours

Prints one line per epoch in the format of ours ("epoch i/n: ... | X s | Y samples/s") and
finally `RESULT mode=... samples_per_s=... last_epoch_samples_per_s=...`: training samples over
the summed time of the epochs' training steps (evaluation excluded, as in ours), and over the
last epoch's alone (no start-up in it: what tools/gpu/check.sh compares with ours' last epoch). PyTorch is Debian's python3-torch
(1.13); it is never a dependency of pipewright. Run by bench/peers/compare.sh.
"""

import argparse
import gzip
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">i", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "i" * ndim, data[4:4 + 4 * ndim])
    array = torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8)
    return array.reshape(dims)


def load(split, limit, data_dir=DATA_DIR):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = (images.reshape(len(images), -1).float() / 255.0 - MEAN) / STD
    return x.contiguous(), labels.long()


def build_model(hidden, dropout):
    layers, width = [], 784
    for h in hidden:
        layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, 10))
    return layers


def blas_name():
    """The BLAS PyTorch calls (Debian's libopenblas.so.0 alternative), with its chosen kernels."""
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return (lib.openblas_get_config().decode() + " core " +
                lib.openblas_get_corename().decode())
    except (OSError, AttributeError):
        return "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["eager", "pipe", "graph"], default="eager")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, nargs="+", default=[512, 512])
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--balance", default="4,5")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-dir", default=DATA_DIR)
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type != "cpu" and args.mode == "pipe":
        sys.exit("--device cuda runs --mode eager or graph")
    if args.mode == "graph" and device.type != "cuda":
        sys.exit("--mode graph needs --device cuda")

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    x_train, y_train = load("train", args.train_limit, args.data_dir)
    x_test, y_test = load("t10k", 0, args.data_dir)
    layers = build_model(args.hidden, args.dropout)

    if args.mode == "pipe":
        import torch.distributed.rpc as rpc
        from torch.distributed.pipeline.sync import Pipe
        os.environ.setdefault("MASTER_ADDR", "localhost")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        rpc.init_rpc("worker", rank=0, world_size=1)
        balance = [int(b) for b in args.balance.split(",")]
        if sum(balance) != len(layers):
            sys.exit(f"--balance {args.balance} does not sum to the {len(layers)} layers")
        partitions, start = [], 0
        for b in balance:
            partitions.append(nn.Sequential(*layers[start:start + b]))
            start += b
        # Every child of the outer Sequential on the CPU is a partition of its own.
        model = Pipe(nn.Sequential(*partitions), chunks=args.chunks, checkpoint="never")
        forward = lambda x: model(x).local_value()
    else:
        model = nn.Sequential(*layers).to(device)
        forward = lambda x: model(x.to(device))

    graph = args.mode == "graph"
    if graph:  # the learning rate lives on the device, so a replay reads each step's value
        optimizer = torch.optim.Adam(model.parameters(), lr=torch.tensor(args.lr, device=device),
                                     capturable=True)
        static_x = torch.zeros(args.batch_size, x_train.shape[1], device=device)
        static_y = torch.zeros(args.batch_size, dtype=torch.long, device=device)
        captured, static_loss, warmup = None, None, 3
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    n = len(x_train)
    steps_per_epoch = math.ceil(n / args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    total_samples, total_seconds, last_seconds = 0, 0.0, 0.0
    where = (f"{torch.cuda.get_device_name(device)} (TF32 matmul "
             f"{torch.backends.cuda.matmul.allow_tf32})" if device.type == "cuda"
             else f"BLAS {blas_name()}")
    print(f"torch {torch.__version__} | mode {args.mode} | threads {torch.get_num_threads()} | "
          f"chunks {args.chunks if args.mode == 'pipe' else '-'} | "
          f"balance {args.balance if args.mode == 'pipe' else '-'} | {where}",
          flush=True)
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(n)
        loss_sum, step = 0.0, 0
        start = time.perf_counter()
        for i in range(0, n, args.batch_size):
            idx = order[i:i + args.batch_size]
            xb, yb = x_train[idx], y_train[idx]
            progress = (epoch * steps_per_epoch + step) / total_steps
            lr = args.lr * 0.5 * (1 + math.cos(math.pi * progress))
            if graph:
                step += 1
                if len(idx) != args.batch_size:
                    continue  # static shapes: the smaller last batch is dropped
                optimizer.param_groups[0]["lr"].fill_(lr)
                static_x.copy_(xb, non_blocking=True)
                static_y.copy_(yb, non_blocking=True)
                if captured is None and warmup > 0:  # eager steps on a side stream first
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        optimizer.zero_grad(set_to_none=True)
                        loss = F.cross_entropy(model(static_x), static_y)
                        loss.backward()
                        optimizer.step()
                    torch.cuda.current_stream().wait_stream(side)
                    warmup -= 1
                elif captured is None:  # capture this step, then run it by replaying
                    captured = torch.cuda.CUDAGraph()
                    optimizer.zero_grad(set_to_none=True)
                    with torch.cuda.graph(captured):
                        static_loss = F.cross_entropy(model(static_x), static_y)
                        static_loss.backward()
                        optimizer.step()
                    captured.replay()
                    loss = static_loss
                else:
                    captured.replay()
                    loss = static_loss
                loss_sum += loss.item() * len(idx)
                continue
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(forward(xb), yb.to(device))
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(idx)
            step += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        total_samples += n
        total_seconds += seconds
        last_seconds = seconds
        model.eval()
        with torch.no_grad():
            correct = sum((forward(x_test[i:i + 1000]).argmax(1).cpu() == y_test[i:i + 1000]).sum().item()
                          for i in range(0, len(x_test), 1000))
        print(f"epoch {epoch + 1}/{args.epochs}: train loss {loss_sum / n:.4f} | test acc "
              f"{correct / len(x_test):.4f} | {seconds:.1f} s | {n / seconds:,.0f} samples/s",
              flush=True)
    print(f"RESULT mode={args.mode} samples_per_s={total_samples / total_seconds:.0f} "
          f"last_epoch_samples_per_s={n / last_seconds:.0f}", flush=True)
    if args.mode == "pipe":
        rpc.shutdown()


if __name__ == "__main__":
    main()
