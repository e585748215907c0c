#!/usr/bin/python3
"""Turns bench/matmul_bench's JSON output into the docs/BENCHMARKS.md table: the median GFLOP/s
per backend, shape and thread count over every file given (one file per process and round, see
bench/matmul_rounds.sh), and ours over the best peer (OpenBLAS, Eigen, BLIS) on that shape.

  bench/matmul_table.py mm-*.json
"""

import collections
import math
import statistics
import sys
import json

BACKENDS = ["ours", "openblas", "eigen", "blis"]


def main():
    samples = collections.defaultdict(lambda: collections.defaultdict(list))
    peaks = []
    for path in sys.argv[1:]:
        for b in json.load(open(path))["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue  # single repetitions only; the median is taken here
            name = b["run_name"].removesuffix("/real_time")
            if name.startswith("peak"):
                peaks.append(b["FLOPS"] / 1e9)
                continue
            backend, threads, shape = name.split("/", 2)
            samples[(shape, threads)][backend].append(b["FLOPS"] / 1e9)
    if peaks:
        print(f"peak/fma (build's vector width, OpenMP threads): "
              f"median {statistics.median(peaks):.0f} GFLOP/s of {len(peaks)}")
    print("| M×K×N | layout | GEMM | threads | " + " | ".join(BACKENDS) +
          " | ours ÷ best peer |")
    print("|---|---|---|---|" + "---|" * len(BACKENDS) + "---|")
    ratios = collections.defaultdict(list)
    for (shape, threads), per_backend in sorted(
            samples.items(), key=lambda kv: (kv[0][1], kv[0][0].split("/")[2], kv[0][0])):
        row = {k: statistics.median(v) for k, v in per_backend.items()}
        dims, layout, label = shape.split("/")
        peers = [v for k, v in row.items() if k != "ours"]
        if "ours" not in row or not peers:
            continue
        ratio = row["ours"] / max(peers)
        ratios[threads].append(ratio)
        cells = " | ".join(f"{row[k]:.0f}" if k in row else "—" for k in BACKENDS)
        print(f"| {dims} | {layout} | {label} | {threads[1:]} | {cells} | {ratio:.2f} |")
    for threads, r in sorted(ratios.items()):
        geo = math.exp(sum(map(math.log, r)) / len(r))
        print(f"{threads}: ours ÷ best peer: min {min(r):.2f}, geometric mean {geo:.2f}, "
              f"{sum(x >= 0.9 for x in r)}/{len(r)} shapes ≥ 0.9")


if __name__ == "__main__":
    main()
