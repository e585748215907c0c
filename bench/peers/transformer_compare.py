#!/usr/bin/python3
"""Runs pipewright's transformer block benchmark and PyTorch eager's side by side, interleaved,
and prints the ratios.

  tools/bazel build //bench:transformer_bench
  bench/peers/transformer_compare.py [--rounds 5] [--threads 2] [--omp-passive]

Each round runs bazel-bin/bench/transformer_bench (block and attention, fused, reference and
flash kernels) and bench/peers/torch_transformer_block.py once, so a change in the machine's load
hits both alike. A subject's time is the median over rounds of each run's time per iteration
(forward + backward); the ratio is PyTorch's time over ours (> 1: ours faster). The 1-minute
load average is printed before and after every run.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OURS = os.path.join(ROOT, "bazel-bin/bench/transformer_bench")
TORCH = os.path.join(ROOT, "bench/peers/torch_transformer_block.py")
RESULT = re.compile(r"^RESULT subject=(\w+) ms=([\d.]+)")
ENV = dict(os.environ)


def load():
    return open("/proc/loadavg").read().split()[0]


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def ours():
    env_cmd = [OURS, "--benchmark_format=json", "--benchmark_filter=^(block|attention)",
               "--benchmark_min_time=2"]
    data = json.loads(run(env_cmd))
    names = {"kernel:0": "fused", "kernel:1": "reference", "kernel:2": "flash"}
    return {"/".join(names.get(part, part) for part in b["name"].split("/") if part != "real_time"):
            b["real_time"] for b in data["benchmarks"]}


def torch_peer(threads, iters):
    out = run(["/usr/bin/python3", TORCH, "--threads", str(threads), "--iters", str(iters)])
    matches = [m for m in map(RESULT.match, out.splitlines()) if m]
    return {f"torch/{m.group(1)}": float(m.group(2)) for m in matches}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--omp-passive", action="store_true",
                   help="OMP_WAIT_POLICY=passive for both (a machine with more runnable threads "
                        "than cores: docs/BENCHMARKS.md, \"OpenMP under load\")")
    args = p.parse_args()
    if args.omp_passive:
        ENV["OMP_WAIT_POLICY"] = "passive"
    ENV["OMP_NUM_THREADS"] = str(args.threads)
    if not os.path.exists(OURS):
        sys.exit(f"{OURS} is missing: tools/bazel build //bench:transformer_bench")
    times = {}
    for r in range(args.rounds):
        for name, fn in (("ours", ours),
                         ("torch", lambda: torch_peer(args.threads, args.iters))):
            before = load()
            result = fn()
            print(f"round {r + 1} {name}: load {before} -> {load()}: " +
                  ", ".join(f"{k} {v:.1f} ms" for k, v in result.items()), flush=True)
            for k, v in result.items():
                times.setdefault(k, []).append(v)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{'subject':<22} {'median ms':>10} {'min':>8} {'max':>8}   torch ÷ ours")
    for subject in ("block", "attention"):
        for k in (f"{subject}/fused", f"{subject}/reference", f"{subject}/flash",
                  f"torch/{subject}"):
            ratio = "" if k.startswith("torch") else f"{med[f'torch/{subject}'] / med[k]:.2f}x"
            print(f"{k:<22} {med[k]:>10.1f} {min(times[k]):>8.1f} {max(times[k]):>8.1f}   {ratio}")


if __name__ == "__main__":
    main()
