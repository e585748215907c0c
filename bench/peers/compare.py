#!/usr/bin/python3
"""Runs the main job in pipewright and in PyTorch side by side and prints the ratios.

  tools/bazel build //examples:fashion_mnist
  bench/peers/compare.py [--epochs 10] [--rounds 3] [--clean-env] [--omp-passive]
      [--variant NAME=FLAGS ...] [--torch-variant NAME=FLAGS ...]
      [--binary NAME="PATH [FLAGS]" ...] [--only NAME,...]

Variants, run interleaved (round 1: all variants in order, round 2: all again, ...), so that a
change in the machine's load hits every variant alike:
  ours          bazel-bin/examples/fashion_mnist (the README's main job: 2 workers, zb-h1, chunks 4)
  ours-gpipe    the same with --schedule gpipe (the schedule torch Pipe runs: like for like)
  ours-stages1  the same with --workers 1 (no pipeline, both cores intra-op)
  torch-eager   bench/peers/torch_fashion_mnist.py --mode eager (2 threads)
  torch-pipe    bench/peers/torch_fashion_mnist.py --mode pipe (torch Pipe, 2 partitions, chunks 4)
plus any --variant NAME="flags for ours" (e.g. ours-1f1b="--schedule 1f1b --chunks 8"), any
--torch-variant NAME="flags for the PyTorch script" (e.g. torch-pipe-1-8="--mode pipe --balance
1,8") and any --binary NAME="PATH [flags]" (the main job from another build, e.g. the commit
before a change).

A run's throughput is its training samples over the summed time of its epochs' training steps
(both programs print per-epoch samples/s of the training loop alone; the harmonic mean of the
epochs' rates is that figure). The table shows the median over rounds, min and max, and each
variant's median relative to torch-eager and torch-pipe. The 1-minute load average is printed
before and after every run. --clean-env runs every variant without OPENBLAS_* variables (some machines set
OPENBLAS_CORETYPE, which pins OpenBLAS's kernels, in PyTorch and in ours alike);
--omp-passive sets OMP_WAIT_POLICY=passive for every variant: on a machine with more runnable
threads than cores, libgomp's default spin-wait at every barrier costs the 2-thread variants
(ours --stages 1, PyTorch eager) up to 50x (docs/BENCHMARKS.md, "OpenMP under load").
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OURS = os.path.join(ROOT, "bazel-bin/examples/fashion_mnist")
TORCH = os.path.join(ROOT, "bench/peers/torch_fashion_mnist.py")
EPOCH = re.compile(r"^epoch \d+/\d+: .*\| ([\d.]+) s \| ([\d,]+) samples/s")


def load():
    return open("/proc/loadavg").read().split()[0]


def run(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    rates = [float(m.group(2).replace(",", "")) for m in map(EPOCH.match, out.stdout.splitlines())
             if m]
    if not rates:
        sys.exit(f"{' '.join(cmd)}: no epoch lines in\n{out.stdout}")
    return len(rates) / sum(1.0 / r for r in rates), out.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clean-env", action="store_true")
    p.add_argument("--variant", action="append", default=[],
                   help='NAME="flags for ours", added after the default variants')
    p.add_argument("--torch-variant", action="append", default=[],
                   help='NAME="flags for torch_fashion_mnist.py", e.g. pipe18="--mode pipe '
                        '--balance 1,8"')
    p.add_argument("--binary", action="append", default=[],
                   help='NAME="PATH [flags]": the main job of another fashion_mnist build')
    p.add_argument("--omp-passive", action="store_true",
                   help="OMP_WAIT_POLICY=passive for every variant (PyTorch's libgomp too)")
    p.add_argument("--only", default="", help="comma-separated variant names to run")
    p.add_argument("--verbose", action="store_true", help="print every run's output")
    args = p.parse_args()

    env = dict(os.environ)
    if args.clean_env:
        env = {k: v for k, v in env.items() if not k.startswith("OPENBLAS_")}
    if args.omp_passive:
        env["OMP_WAIT_POLICY"] = "passive"
    epochs = ["--epochs", str(args.epochs)]
    variants = {
        "ours": [OURS, "--no-progress"] + epochs,
        "ours-gpipe": [OURS, "--no-progress", "--schedule", "gpipe"] + epochs,
        "ours-stages1": [OURS, "--no-progress", "--workers", "1"] + epochs,
        "torch-eager": ["/usr/bin/python3", TORCH, "--mode", "eager"] + epochs,
        "torch-pipe": ["/usr/bin/python3", TORCH, "--mode", "pipe"] + epochs,
    }
    for v in args.variant:
        name, _, flags = v.partition("=")
        variants[name] = [OURS, "--no-progress"] + epochs + flags.split()
    for v in args.torch_variant:
        name, _, flags = v.partition("=")
        variants[name] = ["/usr/bin/python3", TORCH] + epochs + flags.split()
    for b in args.binary:
        name, _, rest = b.partition("=")
        path, *flags = rest.split()
        variants[name] = [path, "--no-progress"] + epochs + flags
    if args.only:
        variants = {k: v for k, v in variants.items() if k in args.only.split(",")}

    print(f"OPENBLAS_* / OMP_* in the environment: "
          f"{ {k: v for k, v in env.items() if k.startswith(('OPENBLAS_', 'OMP_'))} or 'none'}")
    results = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, cmd in variants.items():
            before = load()
            rate, stdout = run(cmd, env)
            results[name].append(rate)
            print(f"round {r + 1} {name:14s} {rate:9,.0f} samples/s  (load {before} -> {load()})",
                  flush=True)
            if args.verbose:
                print(stdout)

    med = {name: statistics.median(rates) for name, rates in results.items()}
    print(f"\nmedians over {args.rounds} rounds of {args.epochs} epochs, training samples/s:")
    header = f"{'variant':14s} {'median':>9s} {'min':>9s} {'max':>9s}"
    peers = [peer for peer in ("torch-eager", "torch-pipe") if peer in med]
    header += "".join(f" {'/ ' + peer:>15s}" for peer in peers)
    print(header)
    for name, rates in results.items():
        line = f"{name:14s} {med[name]:9,.0f} {min(rates):9,.0f} {max(rates):9,.0f}"
        line += "".join(f" {med[name] / med[peer]:15.2f}" for peer in peers)
        print(line)


if __name__ == "__main__":
    main()
