#!/bin/bash
# A GPT-2-small-shaped char GPT (12 layers, dim 768, 12 heads, context 1024, batch 1; the
# fortunes vocabulary: 85.9 M parameters) training on the CPU: ours (//examples:char_gpt, one
# worker, no micro-batches) against PyTorch eager (bench/peers/torch_char_gpt.py, manual
# attention: Debian's torch 1.13 has no scaled_dot_product_attention), fp32 then bf16 (ours:
# the precision policy; torch: CPU autocast, oneDNN), two rounds alternating. Compare our
# "busy per step" (steps 4-6) with torch's step_ms (steps 3-6). docs/BENCHMARKS.md,
# 2026-12-07 08:40.
#
#   tools/bazel build //examples:char_gpt && bench/peers/gpt2_cpu_compare.sh
set -u
cd "$(dirname "$0")/../.."
B=${CHAR_GPT:-bazel-bin/examples/char_gpt}
SHAPE="--layers 12 --dim 768 --heads 12 --context 1024 --batch-size 1"
COMMON="--steps 6 --warmup 1 --eval-every 3 --eval-windows 1 --final-eval-windows 1 --dropout 0"
for round in 1 2; do
  for p in fp32 bf16; do
    echo "== round $round ours $p"
    # shellcheck disable=SC2086
    "$B" --no-progress --sample-chars 0 --workers 1 --chunks 1 $SHAPE $COMMON --precision "$p" 2>&1 |
      grep -E "^step 6|steady|error"
    echo "== round $round torch $p"
    # shellcheck disable=SC2086
    /usr/bin/python3 bench/peers/torch_char_gpt.py --device cpu $SHAPE $COMMON --untimed-steps 2 \
      --precision "$p" --attention manual --threads "$(nproc)" 2>&1 | tail -n 2
  done
done
