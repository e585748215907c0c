#!/usr/bin/env bash
# Runs pipewright's GPU checks from the bundle tools/gpu/pack.sh made, on a machine with a GPU
# and no Bazel (docs/cuda.md, "Running on a GPU machine without Bazel").
#
#   tools/gpu/check.sh OUTDIR [--quick] [--budget SECONDS] [--steps LIST] [--tests REGEX]
#                     (in the repository root, .gpu/ present; PIPEWRIGHT_GPU_BUNDLE=DIR for
#                     another folder)
#
# Each step runs under `timeout`, the whole in at most --budget seconds (default 480), and
# writes one file to OUTDIR (9 in all, summary.txt last):
#   gpu.txt        nvidia-smi, the toolkit, where each CUDA library was found
#   tests.txt      every bundled test with PIPEWRIGHT_REQUIRE_GPU=1, its output and a line
#                  "N passed, M failed, K skipped" (test cases; a crash or timeout is a failure)
#   sanitizer.txt  compute-sanitizer memcheck, racecheck and synccheck on the kernel tests, and
#                  memcheck on a short main-job run
#   mainjob.txt    the main job for 2 epochs on cuda:0 and on cuda:0,cuda:0 (two stages, one
#                  GPU) against the same run on the CPU, and the large MLP (hidden 4096 4096,
#                  batch 4096) on cuda:0; samples/s of the last epoch (no start-up in it); and
#                  the main job with --chunks 1 (no micro-batches, like PyTorch eager's step)
#   peer.txt       PyTorch eager (bench/peers/torch_fashion_mnist.py) on the same card, the
#                  same two models
#   plan.txt       the main job with --plan auto on cuda:0, without and with memory caps: the
#                  plan's predicted step, bubble and peak beside the measured ones
#   bench.txt      //tests/cuda:cuda_bench's tables (GEMM, copy bandwidth, ReLU, BatchNorm, Adam)
#   logs.tar.gz    the whole output of every test and compute-sanitizer run
#   summary.txt    one line per check, and the ratios
# Tests and compute-sanitizer only judge correctness, so they run side by side (as many at once
# as half the machine's cores, at most 8) within the first half of the budget; everything that
# is timed runs after them, one at a time.
# --steps: a comma-separated subset of tests,sanitizer,main,peer,plan,bench (default all), for a
# second call that re-checks only what a fix touched; --tests: only the test binaries whose
# name matches REGEX (e.g. 'gemm|pipe').
# --quick: two tests, one short main-job run, no sanitizer, peer or benchmark (CI's dry run
# against a --cudasim bundle, which needs no GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."

out=${1:?usage: tools/gpu/check.sh OUTDIR [--quick] [--budget SECONDS] [--steps LIST] [--tests REGEX]}
shift
quick=0 budget=480 steps=tests,sanitizer,main,peer,plan,bench test_filter=.
while (($#)); do
  case $1 in
    --quick) quick=1 steps=tests,main ;;
    --budget) budget=${2:?--budget needs seconds}; shift ;;
    --steps) steps=${2:?--steps needs a list}; shift ;;
    --tests) test_filter=${2:?--tests needs a regular expression}; shift ;;
    *) echo "check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
want() { [[ ",$steps," == *",$1,"* ]]; }
bundle=${PIPEWRIGHT_GPU_BUNDLE:-.gpu}
bundle=$(cd "$bundle" 2>/dev/null && pwd || echo "$bundle")
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$SECONDS
summary=()
note() { summary+=("$*"); echo "check.sh: $*" >&2; }

# Seconds left for a step: its own cap, or less so the whole stays within the budget.
cap() {
  local seconds=$1 left=$((budget - (SECONDS - start) - 15))
  ((left < seconds)) && seconds=$left
  ((seconds < 1)) && seconds=1
  echo "$seconds"
}

# ---- the bundle ----
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! tar -C "$work" -xJf "$bundle/bundle.tar.xz"; then
  note "FAILED: cannot unpack $bundle/bundle.tar.xz (run tools/gpu/pack.sh first)"
  printf '%s\n' "${summary[@]}" >"$out/summary.txt"
  exit 1
fi
bin=$work/bin

# The CUDA libraries where this machine keeps them: the toolkit's lib64, and the nvidia/*/lib
# folders of python3's site-packages (PyTorch's pip wheels).
cuda_dirs=()
for d in "${CUDA_PATH:-/usr/local/cuda}/lib64" /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && cuda_dirs+=("$d")
done
if command -v python3 >/dev/null; then
  while read -r site; do
    for d in "$site"/nvidia/*/lib; do [[ -d "$d" ]] && cuda_dirs+=("$d"); done
  done < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
fi
cuda_path=$(IFS=:; echo "${cuda_dirs[*]}")
# The bundle's own libraries only where the machine lacks one: nothing is shadowed.
mkdir -p "$work/missing"
for b in "$bin"/*; do
  LD_LIBRARY_PATH=$cuda_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$b" 2>/dev/null |
    awk '/not found/ {print $1}'
done | sort -u | while read -r soname; do
  [[ -e "$work/lib/$soname" ]] && ln -sf "$work/lib/$soname" "$work/missing/$soname"
done
export LD_LIBRARY_PATH=$cuda_path${cuda_path:+:}$work/missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The data where the binaries look for it (Debian's path), unless the machine has it.
data=/usr/share/datasets/fashion-mnist
if [[ ! -e "$data/train-images-idx3-ubyte.gz" ]]; then
  if mkdir -p "$(dirname "$data")" 2>/dev/null && ln -sfn "$bundle/fashion-mnist" "$data"; then
    :
  else
    note "no $data and no permission to link it: the data-reading checks will fail"
  fi
fi

{
  echo "== nvidia-smi"
  if command -v nvidia-smi >/dev/null; then
    timeout 20 nvidia-smi
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  else
    echo "(no nvidia-smi)"
  fi
  echo "== host"; nproc; uptime; lscpu 2>/dev/null | grep -E "^(Model name|Socket|Core|Thread|CPU\(s\))"
  echo "== nvcc"; command -v nvcc >/dev/null && nvcc --version || echo "(no nvcc)"
  echo "== bundle"; cat "$work/MANIFEST"
  echo "== CUDA library folders"; printf '%s\n' "${cuda_dirs[@]}"
  echo "== taken from the bundle"; ls "$work/missing"
  echo "== libraries of the main job"; ldd "$bin/examples_fashion_mnist"
} >"$out/gpu.txt" 2>&1
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
note "GPU: ${gpu_name:-none found by nvidia-smi} | bundle $(head -1 "$work/MANIFEST")"
unresolved=$(ldd "$bin"/* 2>/dev/null | grep -c "not found")
((unresolved > 0)) && note "FAILED: $unresolved library references not found (gpu.txt)"

# ---- tests and compute-sanitizer, side by side ----
# Neither is timed, so they share the machine: each job is one process under `timeout`, its
# output in $work/jobs/<name>; the phase ends by half the budget (the timings need the rest).
main=$bin/examples_fashion_mnist
max_jobs=$(( $(nproc) / 2 ))
((max_jobs < 1)) && max_jobs=1
((max_jobs > 8)) && max_jobs=8
phase_end=$((start + budget / 2))
mkdir -p "$work/jobs"
job() {  # name, seconds, command...: started once a slot is free, never past the phase's end
  local name=$1 seconds=$2 left
  shift 2
  while (($(jobs -rp | wc -l) >= max_jobs)); do wait -n; done
  left=$((phase_end - SECONDS))
  ((left < seconds)) && seconds=$left
  if ((seconds < 1)); then
    echo "(not started: the phase's time was used up)" >"$work/jobs/$name"
    return
  fi
  (
    t0=$SECONDS
    timeout "$seconds" "$@" >"$work/jobs/$name" 2>&1
    echo "(exit status $?, $((SECONDS - t0)) s of at most $seconds)" >>"$work/jobs/$name"
  ) &
}

tests=()
if want tests; then
  for t in "$bin"/*_test; do
    [[ "$(basename "$t")" =~ $test_filter ]] && tests+=("$t")
  done
  ((quick)) && tests=("$bin/tests_cuda_elementwise_test" "$bin/tests_cuda_reduce_test")
fi
sanitized=()
if want sanitizer && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck synccheck; do
    for k in elementwise reduce softmax batch_norm optim index_select random copy; do
      [[ "$tool" != memcheck && ! "$k" =~ ^(reduce|softmax|batch_norm)$ ]] && continue
      sanitized+=("$tool.tests_cuda_${k}_test")
    done
  done
fi
# The longest first: the sanitized main job, then the tests, then the sanitized kernel tests.
if want sanitizer && command -v compute-sanitizer >/dev/null; then
  PIPEWRIGHT_CUDA_ALLOCATOR=direct job sanitizer.main 180 compute-sanitizer --tool memcheck \
    --print-limit 20 "$main" --no-progress --epochs 1 --train-limit 2048 --test-limit 512 \
    --workers 2 --devices cuda:0,cuda:0
fi
for t in "${tests[@]}"; do
  PIPEWRIGHT_REQUIRE_GPU=1 job "test.$(basename "$t")" 150 "$t"
done
for s in "${sanitized[@]}"; do
  PIPEWRIGHT_REQUIRE_GPU=1 PIPEWRIGHT_CUDA_ALLOCATOR=direct job "sanitizer.$s" 120 \
    compute-sanitizer --tool "${s%%.*}" --print-limit 20 "$bin/${s#*.}"
done
wait

if want tests; then
  passed=0 failed=0 skipped=0
  {
    for t in "${tests[@]}"; do
      name=$(basename "$t")
      log=$work/jobs/test.$name
      echo "== $name"
      # A passing binary's last lines; all of a failing one's (its first failure matters most).
      if grep -q "^All tests passed" "$log"; then tail -n 4 "$log"; else head -n 600 "$log"; fi
      # Catch2 v2: "All tests passed (A assertions in N test cases)" or "test cases: N |
      # P passed | F failed" ("P passed" left out when P is 0); a skipped case counts as passed.
      all=$(sed -n 's/^All tests passed (.* in \([0-9]*\) test case.*/\1/p' "$log" | tail -1)
      n=$(sed -n 's/^test cases: *\([0-9]*\) .*/\1/p' "$log" | tail -1)
      f=$(sed -n 's/^test cases:.*| *\([0-9]*\) failed.*/\1/p' "$log" | tail -1)
      s=$(sed -n 's/^\*\*\* SKIPPED: \([0-9]*\) test case.*/\1/p' "$log" | tail -1)
      s=${s:-0}
      if [[ -n "$all" ]]; then
        passed=$((passed + all - s)) skipped=$((skipped + s))
      elif [[ -n "$n" && -n "$f" ]]; then
        passed=$((passed + n - f - s)) failed=$((failed + f)) skipped=$((skipped + s))
      else
        failed=$((failed + 1))
        echo "(no result line: a crash or a timeout counts as one failure)"
      fi
    done
    echo "${passed} passed, ${failed} failed, ${skipped} skipped"
  } >"$out/tests.txt" 2>&1
  note "tests: $(tail -n 1 "$out/tests.txt") (${#tests[@]} binaries, PIPEWRIGHT_REQUIRE_GPU=1; tests.txt)"
fi

if want sanitizer; then
  if command -v compute-sanitizer >/dev/null; then
    {
      for s in "${sanitized[@]}"; do
        echo "== ${s%%.*} ${s#*.}"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race|Barrier|error|passed|failed|exit status|not started" \
          "$work/jobs/sanitizer.$s" | tail -n 25
      done
      echo "== memcheck fashion_mnist (1 epoch of 2,048 images, two workers on cuda:0)"
      tail -n 25 "$work/jobs/sanitizer.main"
    } >"$out/sanitizer.txt" 2>&1
    # memcheck and synccheck end with "ERROR SUMMARY: N errors", racecheck with
    # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)".
    errors=$(sed -n -e 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' \
      -e 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$out/sanitizer.txt" |
      awk '{s += $1} END {print s + 0}')
    runs=$(grep -c -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.txt")
    note "compute-sanitizer: $errors errors in $runs of $((${#sanitized[@]} + 1)) runs (sanitizer.txt)"
  else
    echo "(no compute-sanitizer on this machine)" >"$out/sanitizer.txt"
    note "compute-sanitizer: not on this machine"
  fi
fi

# ---- the main job (timed: one run at a time from here on) ----
# "epoch 2/2: train loss L | test acc A | T s | S samples/s | ...": A and S of the last epoch.
last_epoch() { grep '^epoch ' | tail -n 1 | sed -n 's/.*test acc \([0-9.]*\).*| \([0-9,]*\) samples\/s.*/\1 \2/p' | tr -d ,; }
run_main() {  # label, seconds, flags...
  local label=$1 seconds=$2
  shift 2
  echo "== $label: fashion_mnist $*"
  timeout "$(cap "$seconds")" "$main" --no-progress "$@" 2>&1 | tee "$work/main.log"
  read -r acc sps < <(last_epoch <"$work/main.log")
  echo "RESULT $label accuracy ${acc:-none} samples_per_s ${sps:-none}"
}
if want main && ((quick)); then
  short=(--epochs 1 --train-limit 1024 --test-limit 512)
  run_main gpu 120 "${short[@]}" --workers 2 --devices cuda:0,cuda:0 >"$out/mainjob.txt" 2>&1
elif want main; then
  {
    run_main cpu 60 --epochs 2
    run_main gpu1 60 --epochs 2 --workers 1 --devices cuda:0
    run_main gpu2 60 --epochs 2 --workers 2 --devices cuda:0,cuda:0
    # Like for like with PyTorch eager's one batch: no micro-batches (a quarter of the launches).
    run_main gpu1c1 60 --epochs 2 --workers 1 --devices cuda:0 --chunks 1
    run_main large1 60 --epochs 2 --workers 1 --devices cuda:0 --hidden 4096 4096 --batch-size 4096
  } >"$out/mainjob.txt" 2>&1
fi
result() { sed -n "s/^RESULT $1 accuracy \([^ ]*\) samples_per_s \([^ ]*\)/\\$2/p" "$out/mainjob.txt" 2>/dev/null | tail -n 1; }
for label in cpu gpu gpu1 gpu2 gpu1c1 large1; do
  acc=$(result "$label" 1)
  [[ -z "$acc" ]] && continue
  line="main job $label: test acc $acc, $(result "$label" 2) samples/s"
  cpu_acc=$(result cpu 1)
  if [[ "$label" == gpu* && -n "$cpu_acc" && "$acc" != none && "$cpu_acc" != none ]]; then
    line+=" ($(awk -v a="$acc" -v c="$cpu_acc" 'BEGIN { d = a - c; if (d < 0) d = -d;
      printf "%.4f from the CPU run: %s", d, d <= 0.01 ? "within 0.01" : "FAILED, over 0.01" }'))"
  fi
  [[ "$acc" == none ]] && line+=" FAILED (mainjob.txt)"
  note "$line"
done

((quick)) && note "quick run: no sanitizer, peer or benchmark"

# ---- the PyTorch peer on the same card ----
if ! want peer; then
  :
elif python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  {
    for config in "--epochs 2" "--epochs 2 --hidden 4096 4096 --batch-size 4096"; do
      echo "== torch eager cuda $config"
      # shellcheck disable=SC2086
      PYTHONUNBUFFERED=1 timeout "$(cap 90)" python3 "$bundle/peers/torch_fashion_mnist.py" \
        --mode eager --device cuda --data-dir "$bundle/fashion-mnist" $config 2>&1 | tail -n 8
    done
  } >"$out/peer.txt" 2>&1
  mapfile -t torch_sps < <(sed -n 's/^RESULT .* last_epoch_samples_per_s=\([0-9.]*\).*/\1/p' "$out/peer.txt")
  ours_main=$(result gpu1 2) ours_two=$(result gpu2 2) ours_large=$(result large1 2)
  ours_c1=$(result gpu1c1 2)
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
  note "PyTorch eager on this card: main job ${torch_sps[0]:-n/a} samples/s (ours 1 stage $(ratio "$ours_main" "${torch_sps[0]:-0}"), 2 stages $(ratio "$ours_two" "${torch_sps[0]:-0}"), 1 stage --chunks 1 $(ratio "$ours_c1" "${torch_sps[0]:-0}")); large MLP ${torch_sps[1]:-n/a} samples/s (ours $(ratio "$ours_large" "${torch_sps[1]:-0}"))"
else
  echo "(no python3 with a CUDA-capable torch)" >"$out/peer.txt"
  note "PyTorch peer: no python3 with CUDA torch here"
fi

# ---- the planner on the card (--plan auto: profiled, probed and timed on cuda:0) ----
# One worker (the planner takes one device per worker, and this machine has one GPU): no cap,
# and two caps below the unplanned peak (12.5 MiB; the least any plan needs is 10.4 MiB), so
# the plan must trade speed for bytes. The example prints the plan's predicted step, bubble
# and peak beside what the run measured.
if want plan; then
  {
    for cap_flags in "" "--memory-cap 12MiB" "--memory-cap 11MiB"; do
      echo "== plan auto cuda:0 $cap_flags"
      # shellcheck disable=SC2086
      timeout "$(cap 90)" "$main" --no-progress --epochs 2 --workers 1 --devices cuda:0 \
        --plan auto --explain $cap_flags 2>&1 | grep -v '^  (\|^model: \|^) ('
    done
  } >"$out/plan.txt" 2>&1
  while read -r line; do note "$line"; done < <(grep -E '^plan: |^plan vs run|^  peak |^planned in' "$out/plan.txt")
fi

# ---- the GPU benchmark ----
if want bench && [[ -x "$bin/tests_cuda_cuda_bench" ]]; then
  timeout "$(cap 90)" "$bin/tests_cuda_cuda_bench" >"$out/bench.txt" 2>&1
  note "cuda_bench: exit status $? (bench.txt)"
  while read -r line; do note "$line"; done < <(grep -E '^SUMMARY' "$out/bench.txt")
fi

tar -C "$work" -czf "$out/logs.tar.gz" jobs 2>/dev/null  # every job's whole output
note "done in $((SECONDS - start)) s"
printf '%s\n' "${summary[@]}" >"$out/summary.txt"
