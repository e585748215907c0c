#!/usr/bin/env bash
# tools/gpu without a GPU:
#  1. libpw_apicount.so preloaded into apicount_driver, which calls a fake libcudart/libcublas:
#     every call reaches the fake with its arguments (the driver checks the return codes), and
#     the counts file names each call as cudasim names it, plus the process's "cudasim" counters;
#  2. report.sh on canned compute-sanitizer logs: errors from memcheck's and racecheck's
#     summaries, timeouts, runs the tool refused, runs never started, tests failing under it;
#  3. report.sh on canned API counts: per step from a long and a short run, card against cudasim;
#  4. report.sh finding the kernels that need racecheck (shared memory, shuffles, via a .cuh);
#  5. keep_run.sh: the kept folder, its name, its size limit;
#  6. kernel_profile.py on a canned Nsight Compute CSV: per-kernel time per step, names shortened.
set -euo pipefail
preload=$(realpath "$1") driver=$(realpath "$2") report=$(realpath "$3") keep_run=$(realpath "$4")
kernel_profile=$(realpath "$5")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
# shellcheck source=../../tools/gpu/report.sh
source "$report"

# ---- 1. the interposer ----
[[ "$("$driver")" == "apicount_driver: 23 calls reached the fake library, 0 failed" ]] ||
  fail "the driver alone: $("$driver" 2>&1)"
got=$(LD_PRELOAD=$preload PIPEWRIGHT_APICOUNT_OUT=$tmp/counts.%p.txt "$driver") ||
  fail "the driver under the interposer: $got"
[[ "$got" == "apicount_driver: 23 calls reached the fake library, 0 failed" ]] ||
  fail "calls lost or changed on the way through the interposer: $got"
counts=$(ls "$tmp"/counts.*.txt)
[[ "$counts" =~ counts\.[0-9]+\.txt$ ]] || fail "%p not replaced by the process id: $counts"
expected='card 1 cudaMalloc
card 1 cudaMemcpy Default
card 1 cudaMemcpyAsync DeviceToHost
card 1 cudaStreamSynchronize
card 1 cudaStreamWaitEvent
card 2 cudaMemcpyAsync HostToDevice
card 3 cublasGemmEx
card 4 cudaEventRecord
card 4 kernel launch
card 5 cublasSgemm
cudasim 2 cudaMemcpyAsync HostToDevice
cudasim 3 kernel launch'
[[ "$(grep -v '^#' "$counts" | sort)" == "$expected" ]] ||
  fail "counts: $(cat "$counts")"
# The variables reach a parent that makes no CUDA call and exits last: it leaves the counts be.
LD_PRELOAD=$preload PIPEWRIGHT_APICOUNT_OUT=$tmp/parent.txt bash -c "\"$driver\" >/dev/null; true"
grep -q "^card 5 cublasSgemm$" "$tmp/parent.txt" || fail "a parent process replaced the counts: $(cat "$tmp/parent.txt")"
LD_PRELOAD=$preload "$driver" 2>"$tmp/stderr" >/dev/null
grep -q "^card 5 cublasSgemm$" "$tmp/stderr" || fail "no counts on stderr without PIPEWRIGHT_APICOUNT_OUT"

# ---- 2. compute-sanitizer logs ----
jobs=$tmp/jobs
mkdir -p "$jobs"
cat >"$jobs/sanitizer.memcheck.tests_cuda_a_test" <<'EOF'
========= COMPUTE-SANITIZER
===============================================================================
All tests passed (120 assertions in 6 test cases)

========= ERROR SUMMARY: 0 errors
(exit status 0, 12 s of at most 150)
EOF
cat >"$jobs/sanitizer.memcheck.tests_cuda_b_test" <<'EOF'
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at void reduce_rows_kernel<float>(const T1 *, T1 *, long, long, bool, bool)+0x1f0 in reduce.cu:33
=========     by thread (31,0,0) in block (2,0,0)
test cases:  4 |  3 passed | 1 failed
assertions: 60 | 59 passed | 1 failed

========= ERROR SUMMARY: 2 errors
(exit status 1, 20 s of at most 150)
EOF
cat >"$jobs/sanitizer.racecheck.tests_cuda_a_test" <<'EOF'
========= COMPUTE-SANITIZER
All tests passed (120 assertions in 6 test cases)

========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
(exit status 0, 30 s of at most 150)
EOF
cat >"$jobs/sanitizer.racecheck.tests_cuda_b_test" <<'EOF'
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at block_sum<float>+0x90 in launch.cuh:127
=========     and Read access at block_sum<float>+0xb0 in launch.cuh:129 [4 hazards]
All tests passed (60 assertions in 4 test cases)

========= RACECHECK SUMMARY: 3 hazards displayed (1 error, 2 warnings)
(exit status 0, 31 s of at most 150)
EOF
cat >"$jobs/sanitizer.memcheck.tests_cuda_pipe_test" <<'EOF'
========= COMPUTE-SANITIZER
(exit status 124, 240 s of at most 240)
EOF
cat >"$jobs/sanitizer.initcheck.tests_cuda_a_test" <<'EOF'
========= COMPUTE-SANITIZER
========= Error: Device not supported
========= Error: Target application terminated before first instrumented API call
(exit status 1, 1 s of at most 150)
EOF
echo "(not started: the phase's time was used up)" >"$jobs/sanitizer.synccheck.tests_cuda_a_test"

# expect_verdict RUN WANT WHAT: sanitizer_verdict of $jobs/sanitizer.RUN is WANT, else fail.
expect_verdict() {
  local got
  got=$(sanitizer_verdict "$jobs/sanitizer.$1")
  [[ "$got" == "$2" ]] || fail "$3: $got"
}
expect_verdict memcheck.tests_cuda_a_test "0 passed 0 ok" "clean memcheck"
expect_verdict memcheck.tests_cuda_b_test "2 failed:1 1 ok" "memcheck with errors"
expect_verdict racecheck.tests_cuda_b_test "1 passed 0 ok" "racecheck hazards"
expect_verdict memcheck.tests_cuda_pipe_test "? - 124 timeout" "timeout"
expect_verdict initcheck.tests_cuda_a_test "? - 1 unsupported" "refused"
expect_verdict synccheck.tests_cuda_a_test "? - - not-started" "not started"
expect_verdict memcheck.absent "? - - not-started" "no log"

line=$(sanitizer_report "$jobs" "$tmp/sanitizer.txt" memcheck.tests_cuda_a_test \
  memcheck.tests_cuda_b_test memcheck.tests_cuda_pipe_test racecheck.tests_cuda_a_test \
  racecheck.tests_cuda_b_test synccheck.tests_cuda_a_test initcheck.tests_cuda_a_test)
want=$(cat <<'EOF'
FAILED: compute-sanitizer: 3 errors in 4 of 7 runs (memcheck 2 in 2/3, racecheck 1 in 2/2, synccheck 0 in 0/1, initcheck 0 in 0/1); 1 ended without a summary (timeout or crash); 1 not started (the phase's time ran out: --budget, or --steps/--tests for a second call); the tool could not run on this machine in 1 (e.g. "Device not supported": a gVisor VM); errors in: memcheck tests_cuda_b_test, racecheck tests_cuda_b_test; tests failing under the tool: memcheck tests_cuda_b_test (sanitizer.txt)
EOF
)
[[ "$line" == "$want" ]] || fail "sanitizer summary line:
  got  $line
  want $want"
grep -qE '^racecheck +tests_cuda_b_test +1 passed +0 ok$' "$tmp/sanitizer.txt" ||
  fail "sanitizer.txt's table: $(cat "$tmp/sanitizer.txt")"
grep -q "^=========     at void reduce_rows_kernel" "$tmp/sanitizer.txt" ||
  fail "sanitizer.txt lacks the error's lines"
clean=$(sanitizer_report "$jobs" "$tmp/clean.txt" memcheck.tests_cuda_a_test racecheck.tests_cuda_a_test)
[[ "$clean" == "compute-sanitizer: 0 errors in 2 of 2 runs (memcheck 0 in 1/1, racecheck 0 in 1/1) (sanitizer.txt)" ]] ||
  fail "clean summary line: $clean"

# ---- 3. API counts per step ----
cat >"$tmp/long.txt" <<'EOF'
# libpw_apicount: process 1
card 100 kernel launch
card 20 cublasSgemm
card 9 cudaStreamSynchronize
card 9 cudaMemcpyAsync DeviceToHost
card 5 cudaMalloc
card 30 cudaEventQuery
EOF
cat >"$tmp/short.txt" <<'EOF'
card 20 kernel launch
card 4 cublasSgemm
card 1 cudaStreamSynchronize
card 1 cudaMemcpyAsync DeviceToHost
card 5 cudaMalloc
card 6 cudaEventQuery
EOF
apicount_per_step 1stage "$tmp/long.txt" "$tmp/short.txt" 8 >"$tmp/card.txt"
expected='1stage card 0 cudaMalloc
1stage card 1 cudaMemcpyAsync DeviceToHost
1stage card 1 cudaStreamSynchronize
1stage card 2 cublasSgemm
1stage card 3 cudaEventQuery
1stage card 10 kernel launch'
[[ "$(sort -k3,3n -k4 "$tmp/card.txt")" == "$expected" ]] || fail "per step: $(cat "$tmp/card.txt")"
sed 's/^card/cudasim/' "$tmp/long.txt" >"$tmp/sim_long.txt"
sed -e 's/^card/cudasim/' -e 's/^cudasim 5 cudaMalloc/cudasim 4 cudaMalloc/' "$tmp/short.txt" >"$tmp/sim_short.txt"
apicount_per_step 1stage "$tmp/sim_long.txt" "$tmp/sim_short.txt" 8 | grep -v EventQuery >"$tmp/sim.txt"
line=$(apicount_compare 1stage "$tmp/card.txt" "$tmp/sim.txt" "$tmp/apicount.txt")
want='API calls per warm step, 1stage: card 10 launches, 2 GEMMs, 1 host waits, 1 reads, 0 event records, 0 allocations | cudasim 10 launches, 2 GEMMs, 1 host waits, 1 reads, 0 event records, 0.125 allocations (1 differ: cudaMalloc) (apicount.txt)'
[[ "$line" == "$want" ]] || fail "API count line:
  got  $line
  want $want"
grep -qE '^cudaMalloc +0 +0.125 differs$' "$tmp/apicount.txt" || fail "apicount.txt: $(cat "$tmp/apicount.txt")"
grep -qE '^cudaEventQuery +3 +-$' "$tmp/apicount.txt" || fail "a name only the card counts: $(cat "$tmp/apicount.txt")"
# A cudasim bundle: the preloaded library saw nothing, cudasim's counters are the run's own.
line=$(apicount_compare 1stage "$tmp/sim.txt" "$tmp/sim.txt" "$tmp/apicount2.txt" "not applicable")
[[ "$line" == *"card n/a | cudasim 10 launches"*"(no card counts: not applicable) (apicount.txt)" ]] ||
  fail "cudasim-only line: $line"
# No cudasim counts (a bundle packed with --no-sim-counts).
line=$(apicount_compare 1stage "$tmp/card.txt" /dev/null "$tmp/apicount3.txt")
[[ "$line" == *"| cudasim n/a (no cudasim counts to compare with) (apicount.txt)" ]] ||
  fail "card-only line: $line"

# ---- 4. kernels that need racecheck ----
k=$tmp/repo/cuda_kernels
mkdir -p "$k"
printf '__device__ T block_sum(T v, T* shared);\n' >"$k/launch.cuh"
printf '#include "cuda_kernels/launch.cuh"\n__global__ void a() { __shared__ float s[32]; }\n' >"$k/a.cu"
printf 'v = __shfl_down_sync(0xffffffffu, v, 1);\n' >"$k/sums.cuh"
printf '#include "cuda_kernels/launch.cuh"\n#include "cuda_kernels/sums.cuh"\n' >"$k/b.cu"
printf '#include "cuda_kernels/launch.cuh"\n__global__ void c(float* x) { x[0] = 1; }\n' >"$k/c.cu"
[[ "$(shared_memory_sources "$k" | xargs -n 1 basename | tr '\n' ' ')" == "a.cu b.cu " ]] ||
  fail "shared-memory kernels: $(shared_memory_sources "$k")"
printf '# comment\ncuda_kernels/a.cu   tests_cuda_a_test tests_cuda_x_test\n' >"$tmp/map.txt"
[[ "$(unmapped_sources "$tmp/map.txt" "$k" "$tmp/repo")" == "cuda_kernels/b.cu" ]] ||
  fail "unmapped: $(unmapped_sources "$tmp/map.txt" "$k" "$tmp/repo")"
[[ "$(mapped_binaries "$tmp/map.txt" | tr '\n' ' ')" == "tests_cuda_a_test tests_cuda_x_test " ]] ||
  fail "mapped binaries: $(mapped_binaries "$tmp/map.txt")"

# ---- 5. keep_run.sh ----
run=$tmp/run
mkdir -p "$run/jobs"
echo "GPU: NVIDIA H200, 580.159.04 | bundle commit abc | started 2026-11-28T19:30Z" >"$run/summary.txt"
echo "90 passed, 0 failed, 12 skipped" >"$run/tests.txt"
cp "$tmp/sanitizer.txt" "$run/sanitizer.txt"
cp "$jobs"/* "$run/jobs/"
tar -C "$run" -czf "$run/logs.tar.gz" jobs
out=$("$keep_run" "$run" --dest "$tmp/kept")
[[ -f "$tmp/kept/2026-11-28/summary.txt" && -f "$tmp/kept/2026-11-28/outputs.tar.xz" &&
   -f "$tmp/kept/2026-11-28/logs.tar.xz" ]] || fail "kept folder: $out; $(ls -R "$tmp/kept")"
[[ "$(tar -tJf "$tmp/kept/2026-11-28/outputs.tar.xz" | sort | tr '\n' ' ')" == "sanitizer.txt tests.txt " ]] ||
  fail "outputs.tar.xz: $(tar -tJf "$tmp/kept/2026-11-28/outputs.tar.xz")"
"$keep_run" "$run" --dest "$tmp/kept" >/dev/null
[[ -d "$tmp/kept/2026-11-28-1930" ]] || fail "a second run of the day: $(ls "$tmp/kept")"
head -c 400000 /dev/urandom | base64 >"$run/bench.txt"
if "$keep_run" "$run" --dest "$tmp/kept" --name big 2>"$tmp/err"; then fail "a kept run over 300 KiB"; fi
grep -q "over the 300 KiB" "$tmp/err" || fail "oversize message: $(cat "$tmp/err")"

# ---- 6. kernel_profile.py ----
cat >"$tmp/ncu.csv" <<'CSV'
==PROF== Connected to process 4242 (/tmp/bin/examples_char_gpt)
==PROF== Profiling "gelu_kernel": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","examples_char_gpt","127.0.0.1","void pipewright::cuda::(anonymous namespace)::gelu_kernel<float>(const float *, long, float *)","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","3,000,000"
"1","4242","examples_char_gpt","127.0.0.1","sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","5000000"
"2","4242","examples_char_gpt","127.0.0.1","void pipewright::cuda::(anonymous namespace)::flash_forward_mma_kernel<pipewright::BFloat16, 64>(const T1 *, const T1 *, const T1 *, long, long, long, long, bool, float, bool, float *, float *)","1","7","(128, 1, 1)","(96, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","1000"
"3","4242","examples_char_gpt","127.0.0.1","void pipewright::cuda::(anonymous namespace)::gelu_kernel<float>(const float *, long, float *)","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","1,000,000"
CSV
got=$(python3 "$kernel_profile" "$tmp/ncu.csv" 2 2)
expected='| kernel | launches / step | ms / step | share | running share |
|---|---|---|---|---|
| `sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas` | 0.5 | 2.500 | 50.0 % | 50.0 % |
| `gelu_kernel<float>` | 1.0 | 2.000 | 40.0 % | 90.0 % |
| (1 more kernels) | 0.5 | 0.500 | 10.0 % | 100.0 % |
TOTAL 2.0 launches, 5.000 ms of kernels a step (3 kernels)'
[[ "$got" == "$expected" ]] || fail "kernel_profile: $got"
python3 "$kernel_profile" "$tmp/ncu.csv" 1 |
  grep -qF '| `flash_forward_mma_kernel<BFloat16, 64>` | 1.0 | 1.000 | 10.0 % | 100.0 % |' ||
  fail "kernel_profile's names or units: $(python3 "$kernel_profile" "$tmp/ncu.csv" 1)"
echo '"ID","Metric Name"' >"$tmp/empty.csv"
if python3 "$kernel_profile" "$tmp/empty.csv" 1 2>"$tmp/err"; then fail "a profile without the metric"; fi
grep -q "no gpu__time_duration.sum rows" "$tmp/err" || fail "empty profile message: $(cat "$tmp/err")"

echo "gpu_check_test: interposer, sanitizer and API-count reports, racecheck map, keep_run, kernel profile as expected"
