#!/usr/bin/env bash
# The main job on a shared machine: samples/s quiet and beside 1 and 2 busy processes (each a
# shell loop that keeps one core busy), for the default pipeline (2 stages), --stages 1 and
# PyTorch eager (bench/peers/torch_fashion_mnist.py), interleaved over rounds; prints the
# medians and the fraction each configuration keeps (docs/BENCHMARKS.md, "Contention").
#
#   tools/bazel build //examples:fashion_mnist
#   bench/contention.sh [rounds] [binary ...]     (default: 3 rounds, bazel-bin's binary)
#
# Give several binaries (e.g. a build from before a change beside the current one) to measure
# them side by side in the same rounds. Each run: 2 epochs of the first 20,000 training images;
# the number is epoch 2's samples/s (the first epoch is cold).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-3}
shift || true
if [[ ! $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "contention.sh: rounds must be a positive integer, got '$rounds'" >&2
  exit 2
fi
binaries=("$@")
((${#binaries[@]})) || binaries=(bazel-bin/examples/fashion_mnist)
flags=(--epochs 2 --train-limit 20000 --test-limit 1000 --no-progress)

busy_pids=()
start_busy() {
  for ((i = 0; i < $1; ++i)); do
    bash -c 'while :; do :; done' &
    busy_pids+=($!)
  done
}
stop_busy() {
  ((${#busy_pids[@]})) && kill "${busy_pids[@]}" 2>/dev/null || true
  wait "${busy_pids[@]}" 2>/dev/null || true
  busy_pids=()
}
trap stop_busy EXIT

# Epoch 2's samples/s of one run.
ours() { "$1" "${flags[@]}" "${@:2}" | sed -n 's/^epoch 2\/2:.* \([0-9,]*\) samples\/s.*/\1/p' | tr -d ,; }
torch() {
  /usr/bin/python3 bench/peers/torch_fashion_mnist.py --mode eager --epochs 2 --train-limit 20000 |
    sed -n 's/^epoch 2\/2:.* \([0-9,]*\) samples\/s.*/\1/p' | tr -d ,
}

declare -A results  # "config|load" -> space-separated samples/s
configs=()
for b in "${binaries[@]}"; do
  configs+=("$b|2 stages" "$b|1 stage")
done
if command -v /usr/bin/python3 >/dev/null && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  configs+=("torch|eager")
else
  echo "PyTorch is not importable by /usr/bin/python3 (apt install python3-torch):" \
    "measuring without the eager peer" >&2
fi

for ((r = 1; r <= rounds; ++r)); do
  for load in 0 1 2; do
    start_busy "$load"
    for c in "${configs[@]}"; do
      bin=${c%%|*} what=${c#*|}
      case "$what" in
        "2 stages") v=$(ours "$bin") ;;
        "1 stage") v=$(ours "$bin" --workers 1) ;;
        eager) v=$(torch) ;;
      esac
      results["$c|$load"]+="${v:-0} "
      echo "round $r, $load busy: $c: ${v:-failed} samples/s" >&2
    done
    stop_busy
  done
done

median() {
  tr ' ' '\n' | grep -v '^$' | sort -n |
    awk '{a[NR] = $1} END {print NR == 0 ? 0 : NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
echo "| configuration | quiet | beside 1 busy process | kept | beside 2 | kept |"
echo "|---|---|---|---|---|---|"
for c in "${configs[@]}"; do
  q=$(echo "${results[$c|0]}" | median)
  one=$(echo "${results[$c|1]}" | median)
  two=$(echo "${results[$c|2]}" | median)
  awk -v c="$c" -v q="$q" -v a="$one" -v b="$two" 'BEGIN { sub(/\|/, ", ", c)
    printf "| %s | %d | %d | %.2fx | %d | %.2fx |\n", c, q, a, q ? a / q : 0, b, q ? b / q : 0 }'
done
