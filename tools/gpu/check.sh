#!/usr/bin/env bash
# Runs pipewright's GPU checks from the bundle tools/gpu/pack.sh made, on a machine with a GPU
# and no Bazel (docs/cuda.md, "Running on a GPU machine without Bazel").
#
#   tools/gpu/check.sh OUTDIR [--quick] [--budget SECONDS] [--steps LIST] [--tests REGEX]
#                     (in the repository root, .gpu/ present; PIPEWRIGHT_GPU_BUNDLE=DIR for
#                     another folder)
#
# Each step runs under `timeout`, the whole in at most --budget seconds (default 480), and
# writes one file to OUTDIR (11 in all, summary.txt last):
#   gpu.txt        nvidia-smi, the toolkit, where each CUDA library and compute-sanitizer were
#                  found
#   tests.txt      every bundled test with PIPEWRIGHT_REQUIRE_GPU=1, its output and a line
#                  "N passed, M failed, K skipped" (test cases; a crash or timeout is a failure)
#   sanitizer.txt  compute-sanitizer, all with PIPEWRIGHT_CUDA_ALLOCATOR=direct (each tensor its
#                  own allocation): memcheck on every bundled test and a short main-job run;
#                  racecheck and synccheck on the tests that run a kernel using shared memory,
#                  warp shuffles or block reductions (tools/gpu/racecheck.txt); initcheck on the
#                  kernel tests (tests_cuda_* but the pipe, stream-order, planner, allocator and
#                  backend ones). A table of every run (errors, test result, exit status), then
#                  the first lines of each run that found errors, failed or did not finish
#   apicount.txt   the CUDA calls of a warm main-job step on this card (libpw_apicount.so,
#                  preloaded: a 12-step run minus a 4-step run, 1 stage and 2 stages on cuda:0)
#                  beside cudasim's count of the same runs (packed with the bundle; in a cudasim
#                  bundle, the run's own)
#   mainjob.txt    the main job for 2 epochs on cuda:0 and on cuda:0,cuda:0 (two stages, one
#                  GPU) against the same run on the CPU, and the large MLP (hidden 4096 4096,
#                  batch 4096) on cuda:0; samples/s of the last epoch (no start-up in it); and
#                  the main job with --chunks 1 (no micro-batches, like PyTorch eager's step)
#   peer.txt       PyTorch eager (bench/peers/torch_fashion_mnist.py) on the same card, the
#                  same two models
#   graphs.txt     the main job with --cuda-graphs (whole steps replayed as CUDA graphs) on
#                  cuda:0 and cuda:0,cuda:0, against our eager runs, PyTorch eager and PyTorch
#                  with its whole step captured by torch.cuda.graph (--mode graph of the peer)
#   plan.txt       the main job with --plan auto on cuda:0, without and with memory caps: the
#                  plan's predicted step, bubble and peak beside the measured ones
#   bench.txt      //tests/cuda:cuda_bench's tables (GEMM, copy bandwidth, ReLU, BatchNorm, Adam,
#                  host cost per call, attention, long reductions)
#   gpt2.txt       (only with --steps gpt2: a few minutes, not in the default steps) issue 41's
#                  baseline: a GPT-2-small-shaped char_gpt (12 layers, dim 768, 12 heads, context
#                  1024, batch 8, the fortunes corpus's vocabulary) training on cuda:0, ours in
#                  fp32 and bf16 (the precision policy; tiled attention, on tensor cores in
#                  bf16: cuda_kernels/attention_mma.cu) against PyTorch eager
#                  fp32, TF32 and bf16 autocast with F.scaled_dot_product_attention
#                  (bench/peers/torch_char_gpt.py), then ours in TF32
#                  (--float32-matmul-precision high), bf16 with the unfused attention and
#                  bf16 at twice the context (attention's memory): tokens/s, step time, peak
#                  memory and MFU
#   profile.txt    (only with --steps profile) where the device time of the gpt2 step's shape
#                  goes, kernel by kernel: Nsight Compute's kernel durations over 2 steps of
#                  ours in bf16 and of PyTorch bf16 + SDPA, as tables (tools/gpu/kernel_profile.py):
#                  what issue 41's fusions are chosen from
#   logs.tar.gz    the whole output of every test, compute-sanitizer run and counted run
#   summary.txt    one line per check, and the ratios
# Tests and compute-sanitizer only judge correctness, so they run side by side (as many at once
# as half the machine's cores, at most 8) within the first half of the budget, the longest
# first; a run the phase has no time left for is reported as not started. Everything after
# them runs one at a time.
# --steps: a comma-separated subset of tests, memcheck, racecheck, synccheck, initcheck,
# apicount, main, peer, graphs, plan, bench (default all; `sanitizer` is the four tools), for a second
# call that re-checks only what a fix touched, and gpt2 (never by default; give it a budget:
# `--steps gpt2 --budget 560`); --tests: only the test binaries whose name
# matches REGEX (e.g. 'gemm|pipe'), for the tests and the sanitizer runs alike.
# --quick: two tests, one short main-job run, the API counts, no sanitizer, peer or benchmark
# (CI's dry run against a --cudasim bundle, which needs no GPU).
# compute-sanitizer is looked for in PIPEWRIGHT_COMPUTE_SANITIZER, on PATH, in the toolkit
# ($CUDA_PATH, /usr/local/cuda*, /opt/nvidia) and in python3's nvidia/* wheels; where it is
# absent, or the machine's runtime refuses it ("Device not supported" on gVisor), the summary
# says so instead of counting 0 errors.
set -uo pipefail
cd "$(dirname "$0")/../.."

out=${1:?usage: tools/gpu/check.sh OUTDIR [--quick] [--budget SECONDS] [--steps LIST] [--tests REGEX]}
shift
all_steps=tests,memcheck,racecheck,synccheck,initcheck,apicount,main,peer,graphs,plan,bench
known_steps=$all_steps,gpt2,profile  # gpt2 and profile run only when asked for (--steps ...)
quick=0 budget=480 steps=$all_steps test_filter=.
while (($#)); do
  case $1 in
    --quick) quick=1 steps=tests,apicount,main ;;
    --budget) budget=${2:?--budget needs seconds}; shift ;;
    --steps) steps=${2:?--steps needs a list}; shift ;;
    --tests) test_filter=${2:?--tests needs a regular expression}; shift ;;
    *) echo "check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
steps=${steps//sanitizer/memcheck,racecheck,synccheck,initcheck}
for s in ${steps//,/ }; do
  if [[ ",$known_steps," != *",$s,"* ]]; then
    echo "check.sh: unknown step '$s' (steps: $known_steps, sanitizer)" >&2
    exit 2
  fi
done
want() { [[ ",$steps," == *",$1,"* ]]; }
here=$(pwd)
# shellcheck source=report.sh
source tools/gpu/report.sh
bundle=${PIPEWRIGHT_GPU_BUNDLE:-.gpu}
bundle=$(cd "$bundle" 2>/dev/null && pwd || echo "$bundle")
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$SECONDS
started=$(date -u +%Y-%m-%dT%H:%MZ)
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
cuda_dirs=() sites=()
for d in "${CUDA_PATH:-/usr/local/cuda}/lib64" /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && cuda_dirs+=("$d")
done
if command -v python3 >/dev/null; then
  mapfile -t sites < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
  for site in "${sites[@]}"; do
    for d in "$site"/nvidia/*/lib; do [[ -d "$d" ]] && cuda_dirs+=("$d"); done
  done
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

# compute-sanitizer: the first of PIPEWRIGHT_COMPUTE_SANITIZER, PATH, the toolkit's folders,
# and python3's nvidia/* wheels (site-packages/nvidia/**/compute-sanitizer).
sanitizer_places="PIPEWRIGHT_COMPUTE_SANITIZER, PATH, \$CUDA_PATH, /usr/local/cuda*/{bin,compute-sanitizer},"
sanitizer_places+=" /opt/nvidia/*/compute-sanitizer, python3's site-packages/nvidia"
# The first of its arguments that is an executable file.
first_executable() {
  local c
  for c; do [[ -n "$c" && -f "$c" && -x "$c" ]] && { echo "$c"; return 0; }; done
  return 1
}
find_sanitizer() {
  local c site
  first_executable "${PIPEWRIGHT_COMPUTE_SANITIZER:-}" "$(command -v compute-sanitizer 2>/dev/null)" \
    "${CUDA_PATH:-/usr/local/cuda}/bin/compute-sanitizer" \
    "${CUDA_PATH:-/usr/local/cuda}/compute-sanitizer/compute-sanitizer" \
    /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer \
    /opt/nvidia/*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer && return 0
  for site in "${sites[@]}"; do
    [[ -d "$site/nvidia" ]] || continue
    c=$(find "$site/nvidia" -maxdepth 4 -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -n 1)
    [[ -n "$c" ]] && { echo "$c"; return 0; }
  done
  return 1
}
sanitizer=$(find_sanitizer)

# Nsight Compute, for the profile step: PIPEWRIGHT_NCU, PATH, the toolkit, /opt/nvidia.
find_ncu() {
  first_executable "${PIPEWRIGHT_NCU:-}" "$(command -v ncu 2>/dev/null)" \
    "${CUDA_PATH:-/usr/local/cuda}/bin/ncu" /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu
}

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
  echo "== compute-sanitizer"
  if [[ -n "$sanitizer" ]]; then echo "$sanitizer"; "$sanitizer" --version 2>&1 | tail -n 2
  else echo "(none found; looked in $sanitizer_places)"; fi
  echo "== bundle"; cat "$work/MANIFEST"
  echo "== CUDA library folders"; printf '%s\n' "${cuda_dirs[@]}"
  echo "== taken from the bundle"; ls "$work/missing"
  echo "== libraries of the main job"; ldd "$bin/examples_fashion_mnist"
} >"$out/gpu.txt" 2>&1
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
note "GPU: ${gpu_name:-none found by nvidia-smi} | bundle $(head -1 "$work/MANIFEST") | started $started"
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

# compute-sanitizer's runs, TOOL.BINARY each: memcheck on every bundled test (and the main job,
# below); racecheck and synccheck on the tests racecheck.txt maps the shared-memory and
# shuffle kernels to; initcheck on the kernel tests. check.sh finds the kernels that need
# racecheck itself and fails when racecheck.txt lacks one (any machine: it reads the sources).
race_map=tools/gpu/racecheck.txt
not_initchecked='pipe|cross_stream|planner|allocator|backend'  # not kernel tests
mapfile -t unmapped < <(unmapped_sources "$race_map" cuda_kernels "$here")
((${#unmapped[@]} > 0)) && note "FAILED: $race_map has no line for ${unmapped[*]} (shared memory," \
  "shuffles or block reductions: racecheck and synccheck would miss it)"
sanitized=()
sanitizer_wanted=0
for tool in memcheck racecheck synccheck initcheck; do want "$tool" && sanitizer_wanted=1; done
if ((sanitizer_wanted)) && [[ -n "$sanitizer" ]]; then
  for t in "$bin"/*_test; do
    name=$(basename "$t")
    [[ "$name" =~ $test_filter ]] || continue
    want memcheck && sanitized+=("memcheck.$name")
  done
  for tool in racecheck synccheck; do
    want "$tool" || continue
    while read -r name; do
      [[ -x "$bin/$name" && "$name" =~ $test_filter ]] && sanitized+=("$tool.$name")
    done < <(mapped_binaries "$race_map")
  done
  if want initcheck; then
    for t in "$bin"/tests_cuda_*_test; do
      name=$(basename "$t")
      [[ -x "$t" && "$name" =~ $test_filter && ! "$name" =~ $not_initchecked ]] &&
        sanitized+=("initcheck.$name")
    done
  fi
fi
sanitize() {  # TOOL.BINARY, seconds, arguments...
  local run=$1 seconds=$2
  shift 2
  PIPEWRIGHT_REQUIRE_GPU=1 PIPEWRIGHT_CUDA_ALLOCATOR=direct job "sanitizer.$run" "$seconds" \
    "$sanitizer" --tool "${run%%.*}" --print-limit 20 "$bin/${run#*.}" "$@"
}
# The longest first, but the tests before the sanitizer's long runs: the sanitized main job,
# the tests (seconds each on a card), the pipeline and example tests under memcheck, then the
# kernel tests under each tool (the shortest, so the last fit the phase's end).
heavy='pipe|examples|planner|cross_stream'
if want memcheck && [[ -n "$sanitizer" && examples_fashion_mnist =~ $test_filter ]]; then
  sanitized=("memcheck.examples_fashion_mnist" "${sanitized[@]}")
  sanitize memcheck.examples_fashion_mnist 180 --no-progress --epochs 1 --train-limit 2048 \
    --test-limit 512 --workers 2 --devices cuda:0,cuda:0
fi
for t in "${tests[@]}"; do
  PIPEWRIGHT_REQUIRE_GPU=1 job "test.$(basename "$t")" 150 "$t"
done
for s in "${sanitized[@]}"; do
  [[ "$s" == memcheck.* && "$s" =~ $heavy && "$s" != *fashion_mnist ]] && sanitize "$s" 240
done
for s in "${sanitized[@]}"; do
  [[ "$s" == memcheck.* && "$s" =~ $heavy ]] || sanitize "$s" 150
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

if ((sanitizer_wanted)); then
  if [[ -z "$sanitizer" ]]; then
    echo "(no compute-sanitizer on this machine; looked in $sanitizer_places)" >"$out/sanitizer.txt"
    note "compute-sanitizer: NOT RUN, none found on this machine (looked in $sanitizer_places)"
  else
    note "$(sanitizer_report "$work/jobs" "$out/sanitizer.txt" "${sanitized[@]}")"
  fi
fi

# ---- the CUDA calls of a warm step, on this card and under cudasim ----
# libpw_apicount.so (tools/gpu/apicount) preloaded into the main job: a long and a short run
# each for one stage and for two on cuda:0, their difference per step (count.sh), beside
# cudasim's count of the same runs: packed with a --config=cuda bundle (pack.sh ran them on
# simulated GPUs), or this run's own where the bundle is a cudasim build (whose runtime is
# linked into the binary, so the preloaded library sees no call and the card column is empty).
if want apicount; then
  preload=$work/preload/libpw_apicount.so
  counted=$work/jobs/apicount/steps.txt
  : >"$out/apicount.txt"
  if [[ ! -f "$preload" ]]; then
    echo "(no preload/libpw_apicount.so in the bundle: packed before it existed)" >"$out/apicount.txt"
    note "API counts: NOT RUN, the bundle has no libpw_apicount.so (pack it again)"
  else
    if ! APICOUNT_TIMEOUT=$(cap 60) tools/gpu/apicount/count.sh "$counted" "$main" "$preload"; then
      failures=$(grep -c '^# failed: ' "$counted")
      first=$(sed -n 's/^# failed: //p' "$counted" | head -n 1)
      note "FAILED: $failures of the counted main-job runs, the first: $first (apicount.txt; jobs/apicount in logs.tar.gz)"
    fi
    sim_counts=$work/apicount-cudasim.txt no_card="the counted runs failed"
    if grep -q "^config --config=cudasim" "$work/MANIFEST"; then
      sim_counts=$counted
      no_card="not applicable under cudasim, whose runtime is inside the binary: nothing to interpose"
    elif [[ ! -f "$sim_counts" ]]; then
      sim_counts=/dev/null  # packed with --no-sim-counts
    fi
    {
      echo "# card column: this machine, bundle $(head -n 1 "$work/MANIFEST"); $(grep -m 1 '^# per warm step' "$counted" | sed 's/^# //')"
      echo "# cudasim column: $(if [[ "$sim_counts" == "$counted" ]]; then echo "the same runs (a cudasim bundle)"
        elif [[ "$sim_counts" == /dev/null ]]; then echo "none (packed with --no-sim-counts)"
        else grep -m 1 '^# cudasim counts' "$sim_counts" | sed 's/^# //'; fi)"
      grep -E '^# ([12]stages?|failed):' "$counted"
      echo
    } >>"$out/apicount.txt"
    for label in $(awk '!/^#/ {print $1}' "$counted" "$sim_counts" | sort -u); do
      note "$(apicount_compare "$label" "$counted" "$sim_counts" "$out/apicount.txt" "$no_card")"
    done
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

# ---- whole steps as CUDA graphs (issue 42): ours --cuda-graphs against ours eager, PyTorch
# eager and PyTorch with its whole step captured by torch.cuda.graph, on the same card ----
if want graphs; then
  {
    run_main graph1 60 --epochs 2 --workers 1 --devices cuda:0 --cuda-graphs
    run_main graph2 60 --epochs 2 --workers 2 --devices cuda:0,cuda:0 --cuda-graphs
    # The eager runs again when the main step was not asked for (the same flags).
    if ! want main; then
      run_main gpu1 60 --epochs 2 --workers 1 --devices cuda:0
      run_main gpu2 60 --epochs 2 --workers 2 --devices cuda:0,cuda:0
    fi
    if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
      for mode in graph eager; do
        echo "== torch $mode cuda --epochs 2"
        PYTHONUNBUFFERED=1 timeout "$(cap 90)" python3 "$bundle/peers/torch_fashion_mnist.py" \
          --mode "$mode" --device cuda --data-dir "$bundle/fashion-mnist" --epochs 2 2>&1 |
          tail -n 4
      done
    fi
  } >"$out/graphs.txt" 2>&1
  gresult() { sed -n "s/^RESULT $1 accuracy \([^ ]*\) samples_per_s \([^ ]*\)/\\$2/p" \
    "$out/graphs.txt" "$out/mainjob.txt" 2>/dev/null | tail -n 1; }
  torch_mode() { sed -n "s/^RESULT mode=$1 .* last_epoch_samples_per_s=\([0-9.]*\).*/\1/p" \
    "$out/graphs.txt" | tail -n 1; }
  gratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
  for stages in 1 2; do
    g=$(gresult "graph$stages" 2) e=$(gresult "gpu$stages" 2)
    note "main job --cuda-graphs $stages stage(s): test acc $(gresult "graph$stages" 1), ${g:-n/a} samples/s; ours eager $(gratio "$g" "$e"), torch eager $(gratio "$g" "$(torch_mode eager)"), torch.cuda.graph $(gratio "$g" "$(torch_mode graph)") (issue 42's goals: >= 2.0x torch eager, >= 1.0x torch graphed)"
  done
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

# ---- issue 41's baseline: a GPT-2-small-shaped model on one GPU, ours against PyTorch ----
# Both train the same model on the same windows (bench/peers/torch_char_gpt.py's docstring):
# ours as one stage without micro-batches (PyTorch eager's step); tokens/s over warm steps
# (ours: its last report's 10 steps; PyTorch: after 10 untimed ones). MFU counts model FLOPs
# per token as 6 N + 12 L T d (N = 12 L d² + d V, the matrices' parameters; attention as a
# full T × T, PaLM's appendix B) against the H200's dense bf16 peak, 989 TFLOP/s, for every
# precision alike. PIPEWRIGHT_GPT2_SHAPE and PIPEWRIGHT_GPT2_STEPS shrink it for a dry run.
if want gpt2; then
  read -r -a shape <<<"${PIPEWRIGHT_GPT2_SHAPE:---layers 12 --dim 768 --heads 12 --context 1024 --batch-size 8}"
  gpt_common=(--steps "${PIPEWRIGHT_GPT2_STEPS:-30}" --warmup 1 --eval-every 10 --eval-windows 8
              --final-eval-windows 8 --dropout 0 --data-dir "$bundle/fortunes")
  gpt_run_ours() {
    local label=$1
    shift
    echo "== ours $label: char_gpt ${shape[*]} $*"
    timeout "$(cap 150)" "$bin/examples_char_gpt" --no-progress --sample-chars 0 --workers 1 \
      --chunks 1 --devices cuda:0 "${shape[@]}" "${gpt_common[@]}" "$@" 2>&1 | tee "$work/gpt.log" |
      grep -E '^(data|final):|^step |error' | tail -n 4
    # RESULT label tokens_per_s peak: from the last report ("step N/N: ... | T tokens/s | ...").
    sed -n 's/^step .* | \([0-9,]*\) tokens\/s.*peak mem [^ ]* \([0-9.]* [KMG]iB\).*/RESULT ours '"$label"' \1 \2/p' \
      "$work/gpt.log" | tail -n 1 | tr -d ,
  }
  gpt_run_peer() {
    local label=$1
    shift
    echo "== torch $label: torch_char_gpt.py ${shape[*]} $*"
    PYTHONUNBUFFERED=1 timeout "$(cap 150)" python3 "$bundle/peers/torch_char_gpt.py" --device cuda \
      "${shape[@]}" "${gpt_common[@]}" --untimed-steps 10 "$@" 2>&1 | tail -n 3 |
      sed 's/^RESULT .*tokens_per_s=\([0-9.]*\) .*peak_mib=\([0-9.]*\).*/&\nRESULT torch '"$label"' \1 \2 MiB/'
  }
  {
    gpt_run_ours fp32 --precision fp32 --attention flash
    gpt_run_ours bf16 --precision bf16 --attention flash
    if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
      gpt_run_peer fp32 --precision fp32 --attention manual
      gpt_run_peer tf32 --precision tf32 --attention manual
      gpt_run_peer bf16-sdpa --precision bf16 --attention sdpa
    else
      echo "(no python3 with a CUDA-capable torch: no PyTorch runs)"
    fi
    # After the peers (the baseline first, should the budget run out): ours with TF32, and bf16
    # with the unfused attention (cuBLAS's batched products) beside the tiled kernels (bf16:
    # tensor cores, attention_mma.cu): which of the two attentions a bf16 run should take.
    gpt_run_ours tf32 --precision fp32 --float32-matmul-precision high --attention flash
    gpt_run_ours bf16-fused --precision bf16 --attention fused
    # Attention's memory is O(T) (issue 41's goal: the peak at twice the context, the same
    # batch, at most 2.2x): ours bf16 once more with --context doubled.
    shape_1x=("${shape[@]}")
    for ((i = 0; i < ${#shape[@]} - 1; ++i)); do
      [[ "${shape[i]}" == --context ]] && shape[i + 1]=$((2 * shape[i + 1]))
    done
    gpt_run_ours bf16-context-2x --precision bf16 --attention flash
    shape=("${shape_1x[@]}")
  } >"$out/gpt2.txt" 2>&1
  shape_value() { local i; for ((i = 0; i < ${#shape[@]} - 1; ++i)); do [[ "${shape[i]}" == "$1" ]] && echo "${shape[i + 1]}"; done; }
  vocab=$(sed -n 's/.*(vocabulary \([0-9]*\)).*/\1/p' "$work/gpt.log" | head -n 1)
  flops_per_token=$(awk -v L="$(shape_value --layers)" -v d="$(shape_value --dim)" \
    -v T="$(shape_value --context)" -v V="${vocab:-0}" 'BEGIN { printf "%.0f", 6 * (12 * L * d * d + d * V) + 12 * L * T * d }')
  while read -r _ who label tokens peak unit; do
    line="gpt2 $who $label: ${tokens:-n/a} tokens/s, peak ${peak:-?} ${unit:-}"
    [[ "$label" == *context-2x ]] ||  # the FLOPs a token above are the 1x context's
      line+=$(awk -v t="$tokens" -v f="$flops_per_token" 'BEGIN { if (t > 0) printf ", MFU %.1f %% of 989 TFLOP/s", 100 * t * f / 989e12 }')
    note "$line"
  done < <(grep '^RESULT \(ours\|torch\) ' "$out/gpt2.txt")
  gpt_peak_bytes() {  # WHO LABEL: the run's peak in bytes
    sed -n "s/^RESULT $1 $2 [0-9.]* \([0-9.]*\) \([KMG]\)iB.*/\1 \2/p" "$out/gpt2.txt" | tail -n 1 |
      awk '{ print $1 * ($2 == "K" ? 1024 : $2 == "M" ? 1048576 : 1073741824) }'
  }
  gpt_tokens() { sed -n "s/^RESULT $1 $2 \([0-9.]*\) .*/\1/p" "$out/gpt2.txt" | tail -n 1; }
  gpt_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
  ratio_of() { gpt_ratio "$(gpt_tokens "$1" "$2")" "$(gpt_tokens "$3" "$4")"; }
  ratios="ours bf16 / torch bf16+SDPA $(ratio_of ours bf16 torch bf16-sdpa)"
  ratios+=", ours bf16 / ours fp32 $(ratio_of ours bf16 ours fp32)"
  ratios+=", ours fp32 / torch fp32 $(ratio_of ours fp32 torch fp32)"
  ratios+=", ours tf32 / torch tf32 $(ratio_of ours tf32 torch tf32)"
  ratios+=", ours bf16 unfused / tiled (tensor-core) attention $(ratio_of ours bf16-fused ours bf16)"
  ratios+=", ours bf16 peak memory at 2x / 1x context $(gpt_ratio "$(gpt_peak_bytes ours bf16-context-2x)" "$(gpt_peak_bytes ours bf16)") (goal <= 2.2x)"
  note "gpt2 ratios: $ratios (${flops_per_token} FLOPs a token)"
fi

# ---- profile: the gpt2 step's shape, kernel by kernel (only with --steps profile) ----
# One metric (gpu__time_duration.sum: one pass, no replay of memory) with the clocks left
# alone (METHOD.md); 2 training steps each, the first included, plus one window of
# evaluation; the peer likewise. PIPEWRIGHT_GPT2_SHAPE shrinks it as for gpt2.
if want profile; then
  read -r -a shape <<<"${PIPEWRIGHT_GPT2_SHAPE:---layers 12 --dim 768 --heads 12 --context 1024 --batch-size 8}"
  prof_steps=2
  prof_common=(--steps "$prof_steps" --warmup 1 --eval-every "$prof_steps" --eval-windows 1
               --final-eval-windows 1 --dropout 0 --data-dir "$bundle/fortunes")
  ncu=$(find_ncu)
  if [[ -z "$ncu" ]]; then
    echo "(no ncu found: PIPEWRIGHT_NCU, PATH, the toolkit, /opt/nvidia/nsight-compute)" >"$out/profile.txt"
    note "profile: NOT RUN, no ncu on this machine"
  else
    ncu_run() {  # CSV PROGRAM...
      local csv=$1
      shift
      timeout "$(cap 240)" "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
        --print-units base --log-file "$csv" "$@" >"$csv.log" 2>&1
      echo "(exit status $?; the program's last lines:)"
      tail -n 3 "$csv.log"
    }
    {
      echo "== $ncu"
      echo "== ours bf16: char_gpt ${shape[*]} --precision bf16 --attention flash"
      ncu_run "$work/ncu_ours.csv" "$bin/examples_char_gpt" --no-progress --sample-chars 0 \
        --workers 1 --chunks 1 --devices cuda:0 "${shape[@]}" "${prof_common[@]}" \
        --precision bf16 --attention flash
      python3 tools/gpu/kernel_profile.py "$work/ncu_ours.csv" "$prof_steps" 30
      echo "== torch bf16-sdpa: torch_char_gpt.py ${shape[*]}"
      ncu_run "$work/ncu_torch.csv" python3 "$bundle/peers/torch_char_gpt.py" --device cuda \
        "${shape[@]}" "${prof_common[@]}" --untimed-steps 0 --precision bf16 --attention sdpa
      python3 tools/gpu/kernel_profile.py "$work/ncu_torch.csv" "$prof_steps" 30
    } >"$out/profile.txt" 2>&1
    totals=$(grep '^TOTAL' "$out/profile.txt" | sed 's/^TOTAL //' | paste -sd ';' -)
    note "profile (ours bf16; torch bf16+SDPA): ${totals:-no kernel times (profile.txt)}"
  fi
fi

tar -C "$work" -czf "$out/logs.tar.gz" jobs 2>/dev/null  # every job's whole output
note "done in $((SECONDS - start)) s"
printf '%s\n' "${summary[@]}" >"$out/summary.txt"
