#!/usr/bin/env bash
# char_gpt_mpi_test.sh <run_mpi.sh> <char_gpt>: the character-level GPT across processes, a
# tiny model for 20 steps on the fortunes corpus; its token embedding (rank 0) and LM head
# (rank 1) are one tied matrix summed across processes (Note [Tied parameters]).
#   - 2 ranks (--workers 2) print the same reports, final loss and sample as one process:
#     the same arithmetic (the tied gradient's two shares add in either order to the same
#     bits; Dropout's masks are keyed by sample, not by process), but for the order in which
#     the ranks' shares of the clipping norm add up (in double);
#   - 4 ranks (--workers 2 --data-parallel 2) train: each report's losses within 1e-3 of one
#     process's (the replicas' all-reduce adds in another order: rounding), and falling.
set -uo pipefail
run_mpi=$1 program=$2
flags=(--workers 2 --layers 2 --dim 16 --heads 2 --context 16 --dropout 0.1 --batch-size 8
  --chunks 4 --steps 20 --warmup 4 --eval-every 10 --eval-windows 16 --final-eval-windows 16
  --sample-chars 40 --lr 1e-2 --no-progress)
failed=0
fail() { echo "FAILED: $*"; failed=1; }
# "step k/n: train loss .. | val loss ..", "final: ..." and the sample (timings dropped).
results() { sed -n -e '/^step /s/ | [0-9.]* s | .*//p' -e '/^final:/p' -e '/^sample /,$p'; }
# "<train loss> <val loss>" of each report.
losses() {
  sed -n -E 's/^step [0-9]+\/[0-9]+: train loss ([^ ]+) .*\| val loss ([^ ]+) .*/\1 \2/p'
}

one=$("$program" "${flags[@]}" 2>&1) || fail "one process: $one"
two=$("$run_mpi" 2 60 "$program" "${flags[@]}" 2>&1) || fail "2 ranks: $two"
echo "one process:"; echo "$one" | results
echo "2 ranks:"; echo "$two" | results
(($(echo "$one" | losses | wc -l) == 2)) || fail "one process: expected 2 reports: $one"
[[ "$(echo "$one" | results)" == "$(echo "$two" | results)" ]] ||
  fail "2 ranks differ from one process"

four=$("$run_mpi" 4 60 "$program" "${flags[@]}" --data-parallel 2 2>&1) || fail "4 ranks: $four"
echo "2 x 2 ranks:"; echo "$four" | results
grep -q '4 MPI ranks = 2 workers x 2 data-parallel replicas' <<<"$four" ||
  fail "no rank layout: $four"
(($(echo "$four" | losses | wc -l) == 2)) ||
  fail "4 ranks: expected 2 reports (rank 0 only): $four"
paste -d ' ' <(echo "$one" | losses) <(echo "$four" | losses) | awk '
  function finite(v) { return v ~ /^[0-9]+\.[0-9]+$/ }
  function far(a, b) { return !finite(a) || !finite(b) || a - b > 1e-3 || b - a > 1e-3 }
  { if (far($1, $3) || far($2, $4)) {
      print "report " NR " (train, val: one process, then 2 x 2): " $0; bad = 1 }
    if (NR == 1) first = $3
    last = $3 }
  END { if (!(last < first)) { print "train loss did not fall: " first " -> " last; bad = 1 }
        exit bad }' ||
  fail "4 ranks: losses not finite, not within 1e-3 of one process's, or not falling"
exit $failed
