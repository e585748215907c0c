#!/usr/bin/python3
"""Turns bench/matmul_bench's JSON (--benchmark_format=json or --benchmark_out) into the
docs/BENCHMARKS.md table: median GFLOP/s per backend, shape and thread count, and ours over
the best peer (OpenBLAS, Eigen, BLIS) on that shape.

  bazel-bin/bench/matmul_bench ... --benchmark_out=mm.json; bench/matmul_table.py mm.json
"""

import collections
import json
import math
import sys

BACKENDS = ["ours", "openblas", "eigen", "blis"]


def main():
    runs = json.load(open(sys.argv[1]))["benchmarks"]
    gflops = collections.defaultdict(dict)  # (shape, threads) -> backend -> GFLOP/s
    for b in runs:
        if b.get("aggregate_name", "median") != "median" or b["name"].startswith("peak"):
            if b["name"].startswith("peak") and b.get("aggregate_name") == "median":
                print(f"peak/fma: {b['FLOPS'] / 1e9:.0f} GFLOP/s")
            continue
        backend, threads, shape = b["run_name"].removesuffix("/real_time").split("/", 2)
        gflops[(shape, threads)][backend] = b["FLOPS"] / 1e9
    print("| M×K×N | layout | GEMM | threads | " + " | ".join(BACKENDS) +
          " | ours ÷ best peer |")
    print("|---|---|---|---|" + "---|" * len(BACKENDS) + "---|")
    ratios = collections.defaultdict(list)
    for (shape, threads), row in gflops.items():
        dims, layout, label = shape.split("/")
        best = max(v for k, v in row.items() if k != "ours")
        ratio = row["ours"] / best
        ratios[threads].append(ratio)
        cells = " | ".join(f"{row.get(k, float('nan')):.0f}" for k in BACKENDS)
        print(f"| {dims} | {layout} | {label} | {threads[1:]} | {cells} | {ratio:.2f} |")
    for threads, r in sorted(ratios.items()):
        geo = math.exp(sum(map(math.log, r)) / len(r))
        print(f"{threads}: ours ÷ best peer: min {min(r):.2f}, geometric mean {geo:.2f}, "
              f"{sum(x >= 0.9 for x in r)}/{len(r)} shapes ≥ 0.9")


if __name__ == "__main__":
    main()
