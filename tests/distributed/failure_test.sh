#!/usr/bin/env bash
# failure_test.sh <run_mpi.sh> <failure_main>: the planted failures of failure_main end the
# job in bounded time with a non-zero status, and the messages name where they began.
set -uo pipefail
run_mpi=$1 program=$2
failed=0
out=$(mktemp)

expect() {  # expect <description> <command...>: the command must fail within its limit
  local what=$1
  shift
  local start=$SECONDS
  "$@" >"$out" 2>&1
  local rc=$?
  echo "== $what: exit status $rc after $((SECONDS - start)) s"
  if ((rc == 0 || rc == 124)); then
    echo "FAILED: $what should end with an error, not rc $rc"; cat "$out"; failed=1
  fi
}

origin='rank 1 (replica 0, worker 1): stage 1, micro-batch 1 (F): planted failure'

expect "a stage throws (2 ranks)" "$run_mpi" 2 60 "$program" throw
n=$(grep -cF "caught: $origin" "$out")
if ((n != 2)); then echo "FAILED: 2 ranks should report '$origin', $n did"; cat "$out"; failed=1; fi

expect "a stage throws (2 workers x 2 replicas)" "$run_mpi" 4 60 "$program" throw --replicas 2
n=$(grep -cF "caught: $origin" "$out")
if ((n != 4)); then echo "FAILED: 4 ranks should report '$origin', $n did"; cat "$out"; failed=1; fi

expect "a rank is killed (SIGKILL)" "$run_mpi" 2 60 "$program" kill
if ! grep -q "signal 9" "$out"; then echo "FAILED: mpirun should name the signal"; cat "$out"; failed=1; fi

PIPEWRIGHT_MPI_TIMEOUT=3 expect "a rank stalls" "$run_mpi" 2 60 "$program" stall
if ! grep -q "rank 0 caught: rank 0 (replica 0, worker 0): stage 0, micro-batch .* waited 3" "$out"; then
  echo "FAILED: rank 0 should report its timeout"; cat "$out"; failed=1
fi
# A loss without autograd history (Tensor::reshape inside loss_fn) is refused on the last
# stage's rank and reported by every rank, never trained on as zeros.
expect "a loss without history (2 workers x 2 replicas)" "$run_mpi" 4 60 "$program" no-history --replicas 2
n=$(grep -cE "caught: rank [13] \(replica [01], worker 1\): stage 1, micro-batch 0 \(F\): train_step: the loss of micro-batch 0 \(last stage, 1\) has no autograd history, though the stage's outputs have one: loss_fn dropped it" "$out")
if ((n != 4)); then echo "FAILED: 4 ranks should report the loss without history, $n did"; cat "$out"; failed=1; fi
rm -f "$out"
exit $failed
