#!/usr/bin/env bash
# Runs //examples:pipeline_tour and //examples:custom_schedule (see tests/examples/BUILD.bazel).
set -euo pipefail
tour=examples/pipeline_tour
custom=examples/custom_schedule

out=$("$tour" zb-h1)
grep -q "schedule zb-h1, 2 workers, 4 micro-batches" <<<"$out"
# Every action of the step is in the trace: 4 F + 4 I + 4 W per stage, plus stage 0's 3 R
# (checkpoint except_last recomputes micro-batches 0..2 on both stages, so 6 R in all).
for w in 0 1; do
  n=$(grep -cE "^  worker $w  [FRIW][0-9]@" <<<"$out")
  [[ $n -eq 15 ]] || { echo "worker $w ran $n actions, expected 15"; echo "$out"; exit 1; }
done
grep -q "parameters with a gradient: 6 of 6" <<<"$out"

svg=$TEST_TMPDIR/custom.svg
"$custom" "$svg"
grep -q "<svg" "$svg"
echo PASSED
