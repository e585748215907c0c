#!/usr/bin/env bash
# checkpoint_chaos_test.sh <run_mpi.sh> <fashion_mnist>: Note [Checkpoints that commit]
# (examples/common/run_checkpoint.cc) under fire. A 4-rank run (2 stages x 2 data-parallel
# replicas) saving every epoch has one rank SIGKILLed, 20 times: 11 times at a random moment
# (seeded), 9 times at each phase boundary of a save (a rank dead before or after its shard,
# rank 0 dead before or after the commit; the last after the final epoch's commit and before
# its clean-up, so the resumed run has nothing to train and must still remove the previous
# generation's shards). Each time:
#   - mpirun ends with a non-zero status within 60 s of the kill;
#   - the commit record on disk names a complete generation, never a newer partial one;
#   - the same command with --resume (or without, when nothing was committed yet) completes,
#     saying which uncommitted generation it ignored, and its final shards and commit record
#     are byte-identical to those of a run never interrupted, with no other generation left.
# Then the killed run's checkpoint resumes under another cut (4 stages, 1 replica).
set -uo pipefail
run_mpi=$1 program=$2
dir="${TEST_TMPDIR:-$(mktemp -d)}/chaos"
rm -rf "$dir" && mkdir -p "$dir"
epochs=5
flags=(--workers 2 --data-parallel 2 --epochs "$epochs" --train-limit 400 --test-limit 100
       --batch-size 100 --hidden 16 --chunks 2 --threads 1 --optimizer sgd --seed 3 --no-progress)
failed=0
fail() { echo "FAILED: $*"; failed=1; }
now_ms() { date +%s%3N; }

# The uninterrupted run.
t0=$(now_ms)
"$run_mpi" 4 120 "$program" "${flags[@]}" --save "$dir/ref" >"$dir/ref.log" 2>&1 ||
  { cat "$dir/ref.log"; echo "FAILED: the uninterrupted run"; exit 1; }
run_ms=$(($(now_ms) - t0))
[[ -f "$dir/ref" ]] || { echo "FAILED: no commit record after the uninterrupted run"; exit 1; }
echo "uninterrupted run: $run_ms ms"

# The rank processes of the run saving to $1 (mpirun's and timeout's command lines hold the same
# arguments: keep the processes running the example itself).
ranks_of() {
  local pid
  for pid in $(pgrep -f -- "--save $1( |$)"); do
    [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == *fashion_mnist ]] && echo "$pid"
  done
}

# Newest generation with a shard on disk, and the committed one (from the commit's shards:
# after a commit, the only generation left), for the checks below.
generations() { ls "$dir" | sed -n 's/^ckpt\.\([0-9]*\)\.rank[0-9]*$/\1/p' | sort -n | uniq; }

RANDOM=11
kills=0 timed=0 completed=0 phases=(shard:1:2 written:3:2 commit:0:3 committed:0:3 shard:2:1 written:0:4 commit:0:1 committed:2:4
        committed:1:$epochs)
for ((round = 0; kills < 20 && round < 40; ++round)); do
  rm -f "$dir"/ckpt*
  fault=""
  if ((round < ${#phases[@]})); then fault=${phases[$round]}; fi
  PIPEWRIGHT_CHECKPOINT_FAULT=$fault "$run_mpi" 4 120 "$program" "${flags[@]}" --save "$dir/ckpt" \
    >"$dir/killed.log" 2>&1 &
  launcher=$!
  if [[ -z "$fault" ]]; then
    # Once the ranks run: a moment within 80 % of the uninterrupted run's length (a sampling
    # range, not a timing assertion), and one rank, drawn at random.
    pids=()
    while ((${#pids[@]} < 4)) && kill -0 "$launcher" 2>/dev/null; do
      sleep 0.05
      mapfile -t pids < <(ranks_of "$dir/ckpt")
    done
    delay_ms=$((RANDOM * RANDOM % (run_ms * 8 / 10)))
    sleep "$((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000)))"
    ((${#pids[@]})) && kill -9 "${pids[$((RANDOM % ${#pids[@]}))]}" 2>/dev/null
    ((++timed))
  fi
  killed_at=$(now_ms)
  wait "$launcher"
  rc=$?
  ended_ms=$(($(now_ms) - killed_at))
  if ((rc == 0)); then ((++completed)); continue; fi  # it ended before the kill
  ((++kills))
  ((ended_ms <= 60000)) || fail "round $round ($fault): mpirun ended $ended_ms ms after the kill"
  grep -q "signal 9\|Killed" "$dir/killed.log" || fail "round $round ($fault): no kill reported: $(tail -5 "$dir/killed.log")"

  # What is on disk: the commit (if any) and the newest generation with a shard.
  partial=$(generations | tail -1)
  committed=$(grep -aom1 '"checkpoint.generation":"[0-9]*"' "$dir/ckpt" 2>/dev/null | tr -dc 0-9)
  if [[ -f "$dir/ckpt" ]]; then
    resume=(--resume "$dir/ckpt")
  else
    resume=()
    out=$("$run_mpi" 4 60 "$program" "${flags[@]}" --resume "$dir/ckpt" 2>&1) &&
      fail "round $round ($fault): --resume without a commit record should fail"
    if [[ -n "$partial" ]]; then
      grep -q "no checkpoint at $dir/ckpt: there are shards of generation(s) .* but no commit record" <<<"$out" ||
        fail "round $round ($fault): no clear message for uncommitted shards: $out"
    fi
  fi
  "$run_mpi" 4 120 "$program" "${flags[@]}" "${resume[@]}" --save "$dir/ckpt" >"$dir/resumed.log" 2>&1 ||
    { fail "round $round ($fault): the resumed run failed"; cat "$dir/resumed.log"; continue; }
  if ((${#resume[@]})); then
    grep -q "resumed from $dir/ckpt after epoch $committed\$" "$dir/resumed.log" ||
      fail "round $round ($fault): no line 'resumed ... after epoch $committed': $(head -5 "$dir/resumed.log")"
    if ((partial > committed)); then
      grep -q "^ignored generation $partial at $dir/ckpt: [1-4] of 4 shards and no commit" "$dir/resumed.log" ||
        fail "round $round ($fault): generation $partial was on disk uncommitted, and not reported"
    fi
  fi
  left=$(generations | tr '\n' ' ')
  [[ "$left" == "$epochs " ]] || fail "round $round ($fault): generations left on disk: $left"
  for r in 0 1 2 3; do
    cmp -s "$dir/ref.$epochs.rank$r" "$dir/ckpt.$epochs.rank$r" ||
      fail "round $round ($fault): the shard of rank $r differs from the uninterrupted run's"
  done
  cmp -s "$dir/ref" "$dir/ckpt" || fail "round $round ($fault): the commit record differs"
  echo "round $round: ${fault:-random kill} -> mpirun ended in $ended_ms ms; resumed$(grep -o ' after epoch [0-9]*' "$dir/resumed.log" | head -1)$(grep -c '^ignored generation' "$dir/resumed.log" | sed 's/^0$//; s/^\(.\)/, ignored an uncommitted generation/')"
done
((kills >= 20)) || fail "only $kills kills in $round rounds ($completed runs ended first)"

# An uncommitted generation is reported, and a killed 2 x 2 run resumes under another cut.
rm -f "$dir"/ckpt*
PIPEWRIGHT_CHECKPOINT_FAULT=commit:0:3 "$run_mpi" 4 120 "$program" "${flags[@]}" --save "$dir/ckpt" \
  >/dev/null 2>&1 && fail "the planted kill did not happen"
out=$("$run_mpi" 4 120 "$program" --workers 4 --data-parallel 1 --epochs "$epochs" --train-limit 400 \
  --test-limit 100 --batch-size 100 --hidden 16 --chunks 2 --threads 1 --optimizer sgd --seed 3 \
  --no-progress --resume "$dir/ckpt" 2>&1) || fail "resume under 4 stages x 1 replica: $out"
grep -q "^ignored generation 3 at $dir/ckpt: 4 of 4 shards and no commit" <<<"$out" ||
  fail "no line for the uncommitted generation 3: $out"
grep -q "resumed from $dir/ckpt after epoch 2" <<<"$out" || fail "no resume line: $out"
(($(echo "$out" | grep -c '^epoch') == epochs - 2)) || fail "expected $((epochs - 2)) epochs: $out"

echo "$kills kills ($timed at random moments, $((kills - timed)) at save phases), $completed runs ended before their kill"
exit $failed
