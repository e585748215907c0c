#!/usr/bin/env bash
# Runs bench/matmul_bench once per backend per round, each in a process of its own (a
# library's idle threads spin-wait after its last call and would slow the next backend in the
# same process), rounds interleaved; then prints the docs/BENCHMARKS.md table.
#
#   tools/bazel build //bench:matmul_bench
#   bench/matmul_rounds.sh OUT_DIR [ROUNDS=3] [extra benchmark flags...]
set -euo pipefail
out=${1:?usage: bench/matmul_rounds.sh OUT_DIR [ROUNDS] [flags...]}
rounds=${2:-3}
shift $(($# >= 2 ? 2 : 1))
bin="$(dirname "$0")/../bazel-bin/bench/matmul_bench"
mkdir -p "$out"
lscpu | grep -E 'Model name' > "$out/machine.txt"
# The first line the bench prints: which kernels OpenBLAS chose (OPENBLAS_CORETYPE overrides).
"$bin" --benchmark_filter='^none$' 2>/dev/null | head -1 | tee -a "$out/machine.txt" || true
for ((r = 1; r <= rounds; r++)); do
  for backend in peak ours openblas eigen blis; do
    echo "round $r $backend: load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/load.txt"
    "$bin" --benchmark_filter="^$backend/" --benchmark_min_time=0.05 \
      --benchmark_format=json --benchmark_out="$out/mm-$r-$backend.json" "$@" > /dev/null \
      || echo "  (nothing measured: $backend absent?)"
  done
done
echo "end: load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/load.txt"
"$(dirname "$0")/matmul_table.py" "$out"/mm-*.json
