#!/usr/bin/env bash
# fashion_mnist_mpi_test.sh <run_mpi.sh> <fashion_mnist>: the example across processes.
#   - 2 ranks (--workers 2) print the same epoch results (loss, accuracy) as one process;
#   - 4 ranks (--workers 2 --data-parallel 2) train, naming the rank layout, and --trace
#     writes one trace with a process per rank;
#   - --save / --resume write one shard per rank and resume a 2 x 2 run bitwise;
#   - a wrong rank count and a missing data directory end every rank with an error.
set -uo pipefail
run_mpi=$1 program=$2
flags=(--workers 2 --epochs 2 --train-limit 2048 --test-limit 500 --batch-size 128 --no-progress)
failed=0
fail() { echo "FAILED: $*"; failed=1; }
results() { grep '^epoch' | sed 's/ | [0-9.]* s | .*//'; }  # "epoch k/n: train loss .. | test acc .."

one=$("$program" "${flags[@]}" 2>&1) || fail "one process: $one"
two=$("$run_mpi" 2 120 "$program" "${flags[@]}" 2>&1) || fail "2 ranks: $two"
echo "one process:"; echo "$one" | results
echo "2 ranks:"; echo "$two" | results
[[ -n "$(echo "$one" | results)" ]] || fail "no epoch lines"
[[ "$(echo "$one" | results)" == "$(echo "$two" | results)" ]] || fail "2 ranks differ from one process"

trace="${TEST_TMPDIR:-/tmp}/trace.json"
four=$("$run_mpi" 4 180 "$program" "${flags[@]}" --data-parallel 2 --trace "$trace" 2>&1) ||
  fail "4 ranks: $four"
for rank in 0 1 2 3; do  # one process per rank in the trace, each with its F actions
  grep -q "\"cat\":\"forward\"[^}]*\"pid\":$rank" "$trace" || fail "trace: no F of rank $rank"
done
grep -q '4 MPI ranks = 2 workers x 2 data-parallel replicas' <<<"$four" || fail "no rank layout: $four"
(($(echo "$four" | grep -c '^epoch') == 2)) || fail "4 ranks: expected 2 epoch lines (rank 0 only): $four"

# --save / --resume across processes: one shard per rank and a commit record naming them;
# stopping after epoch 1 and resuming gives shards byte-identical to an uninterrupted run's
# (weights, BatchNorm statistics per replica, optimizer state, generators), and the same commit.
dir="${TEST_TMPDIR:-/tmp}"
dp=("${flags[@]}" --data-parallel 2)
"$run_mpi" 4 180 "$program" "${dp[@]}" --save "$dir/full.st" >/dev/null 2>&1 || fail "full run"
"$run_mpi" 4 180 "$program" "${dp[@]}" --stop-after 1 --save "$dir/part.st" >/dev/null 2>&1 ||
  fail "first half"
resumed=$("$run_mpi" 4 180 "$program" "${dp[@]}" --resume "$dir/part.st" --save "$dir/resumed.st" 2>&1) ||
  fail "resumed run: $resumed"
grep -q "resumed from $dir/part.st after epoch 1" <<<"$resumed" || fail "no resume line: $resumed"
for rank in 0 1 2 3; do
  cmp -s "$dir/full.st.2.rank$rank" "$dir/resumed.st.2.rank$rank" || fail "shard of rank $rank differs"
done
cmp -s "$dir/full.st" "$dir/resumed.st" || fail "the commit records differ"

out=$("$run_mpi" 3 60 "$program" "${flags[@]}" 2>&1) && fail "3 ranks for 2 stages should fail"
grep -q 'mpirun started 3 processes, but --workers 2 x --data-parallel 1 needs 2' <<<"$out" ||
  fail "3 ranks: no clear message: $out"

out=$("$run_mpi" 2 60 "$program" "${flags[@]}" --data-dir /nonexistent 2>&1) && fail "missing data should fail"
grep -q 'rank [01]: error: .*/nonexistent' <<<"$out" || fail "missing data: no message naming it: $out"
exit $failed
