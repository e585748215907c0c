#!/usr/bin/env python3
"""Where a training step's device time goes, kernel by kernel, from Nsight Compute's CSV.

  ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \\
      --log-file run.csv PROGRAM...
  tools/gpu/kernel_profile.py run.csv STEPS [TOP]

Reads the rows whose "Metric Name" is gpu__time_duration.sum (nanoseconds, as --print-units
base prints them), groups them by kernel (the demangled name without its parameter list and
without pipewright's namespaces, so each template instantiation stays its own row), and prints
a Markdown table of the TOP (default 25) kernels by time: launches and device milliseconds per
step (the totals divided by STEPS), the share of all kernel time and the running share; then a
line with the total. tools/gpu/check.sh's profile step runs it on ours and on PyTorch's step;
the fusions issue 41 asks for are decided from these tables. Exits 1 on a file without that
metric.
"""

import csv
import re
import sys
from collections import defaultdict


def short_name(name: str) -> str:
    """`void ns::f<T, 64>(const T *, int)` -> `f<T, 64>`, pipewright's namespaces dropped."""
    name = name.strip()
    if name.startswith("void "):
        name = name[len("void "):]
    # Drop the parameter list: the last top-level parenthesised group at the end.
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    for prefix in ("pipewright::cuda::(anonymous namespace)::", "pipewright::cuda::",
                   "pipewright::"):
        name = name.replace(prefix, "")
    return name


def profile(rows, steps: int):
    """(kernel, launches, total ns) sorted by time, largest first."""
    time_ns = defaultdict(float)
    launches = defaultdict(int)
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = row.get("Metric Value", "").replace(",", "")
        try:
            ns = float(value)
        except ValueError:
            continue
        unit = row.get("Metric Unit", "nsecond")
        ns *= {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1)
        kernel = short_name(row.get("Kernel Name", "?"))
        time_ns[kernel] += ns
        launches[kernel] += 1
    return sorted(((k, launches[k], t) for k, t in time_ns.items()), key=lambda r: -r[2])


def main(argv) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    steps = int(argv[2])
    top = int(argv[3]) if len(argv) > 3 else 25
    with open(argv[1], newline="") as f:
        # ncu's own lines (==PROF== ...) precede the CSV: start at the header.
        lines = [line for line in f if line.startswith('"')]
    table = profile(csv.DictReader(lines), steps)
    if not table:
        print(f"kernel_profile: no gpu__time_duration.sum rows in {argv[1]}", file=sys.stderr)
        return 1
    total = sum(t for _, _, t in table)
    print("| kernel | launches / step | ms / step | share | running share |")
    print("|---|---|---|---|---|")
    running = 0.0
    for kernel, count, t in table[:top]:
        running += t
        print(f"| `{kernel}` | {count / steps:.1f} | {t / steps / 1e6:.3f} | "
              f"{100 * t / total:.1f} % | {100 * running / total:.1f} % |")
    rest = table[top:]
    if rest:
        print(f"| ({len(rest)} more kernels) | {sum(c for _, c, _ in rest) / steps:.1f} | "
              f"{sum(t for _, _, t in rest) / steps / 1e6:.3f} | "
              f"{100 * sum(t for _, _, t in rest) / total:.1f} % | 100.0 % |")
    print(f"TOTAL {sum(c for _, c, _ in table) / steps:.1f} launches, "
          f"{total / steps / 1e6:.3f} ms of kernels a step ({len(table)} kernels)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
