#!/usr/bin/env bash
# Counts the CUDA calls of a warm main-job step: runs MAIN (//examples:fashion_mnist) under
# PRELOAD (libpw_apicount.so) for a long and a short run in each configuration, and writes
# (long - short) / (the steps between them) per name to OUT, as lines
# "CONFIG SOURCE PER_STEP NAME" (report.sh: apicount_per_step). Start-up, the first steps and
# the epoch's evaluation are in both runs and cancel; what is left is the steps after the
# short run's last, warm ones. SOURCE is "card" for the calls the preloaded library saw and
# "cudasim" for a cudasim build's own counters (cudasim::api_counts).
#
#   tools/gpu/apicount/count.sh OUT MAIN PRELOAD
#
# The main job as check.sh runs it (batch 256 in 4 micro-batches, Adam, ZB-H1), 256 test
# images; configurations "1stage" (--workers 1 --devices cuda:0) and "2stages" (--workers 2
# --devices cuda:0,cuda:0). Runs of 12 and 4 steps (8 counted): about 15 s in all on simulated
# GPUs, 2 cores. Each run's counts and output are kept in OUT's folder as
# apicount.CONFIG.STEPS.{txt,log}. APICOUNT_TIMEOUT: seconds per run (120).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../report.sh
source "$here/../report.sh"

usage="usage: tools/gpu/apicount/count.sh OUT MAIN PRELOAD"
out=${1:?$usage} main=${2:?$usage} preload=${3:?$usage}
dir=$(dirname "$out")
mkdir -p "$dir"
configs=("1stage|--workers 1 --devices cuda:0" "2stages|--workers 2 --devices cuda:0,cuda:0")
long=12 short=4

status=0
{
  echo "# per warm step: a ${long}-step run minus a ${short}-step run, / $((long - short))"
  echo "# $(basename "$main") --no-progress --epochs 1 --train-limit (256 x steps) --test-limit 256 (flags per config below)"
} >"$out"
for config in "${configs[@]}"; do
  label=${config%%|*} flags=${config#*|}
  echo "# $label: $flags" >>"$out"
  ok=1
  for steps in "$long" "$short"; do
    counts=$dir/apicount.$label.$steps.txt
    rm -f "$counts"
    # The library preloaded into the main job alone (env, not timeout, gets the variables).
    # shellcheck disable=SC2086
    timeout "${APICOUNT_TIMEOUT:-120}" env PIPEWRIGHT_APICOUNT_OUT="$counts" \
      LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}" "$main" --no-progress --epochs 1 \
      --train-limit $((256 * steps)) --test-limit 256 $flags >"$dir/apicount.$label.$steps.log" 2>&1
    rc=$?
    if ((rc != 0)) || [[ ! -s "$counts" ]]; then
      echo "# failed: $label $steps steps, exit status $rc, $( [[ -s "$counts" ]] || echo "no counts, ")last line: $(tail -n 1 "$dir/apicount.$label.$steps.log")" >>"$out"
      ok=0 status=1
    fi
  done
  ((ok)) && apicount_per_step "$label" "$dir/apicount.$label.$long.txt" \
    "$dir/apicount.$label.$short.txt" $((long - short)) >>"$out"
done
exit $status
