#!/usr/bin/env bash
# Builds the GPU bundle: everything tools/gpu/check.sh runs on a machine that has a GPU but no
# Bazel, no apt and no network (docs/cuda.md, "Running on a GPU machine without Bazel").
#
#   tools/gpu/pack.sh [--cudasim] [--no-sim-counts] [OUTDIR]   (OUTDIR default: .gpu, git-ignored)
#
# What goes in OUTDIR:
#   bundle.tar.xz   bin/   every one-process gpu-tagged test, //examples:fashion_mnist,
#                          //examples:char_gpt and //tests/cuda:cuda_bench, built with --config=cuda and the project
#                          linked statically (--dynamic_mode=off), stripped;
#                   lib/   the shared libraries they load that a GPU machine may lack (ldd:
#                          OpenMPI, OpenBLAS, libgfortran, libgomp, hwloc, ...), never the CUDA
#                          libraries (libcudart, libcublas, libcublasLt, libcudnn, libnccl,
#                          libcuda: the machine has its own) nor the C and C++ runtimes;
#                   MANIFEST the labels, the commit and the build configuration;
#                   preload/libpw_apicount.so  the LD_PRELOAD library that counts CUDA calls
#                          (tools/gpu/apicount), for check.sh's apicount step;
#                   apicount-cudasim.txt  (--config=cuda only) the calls of a warm main-job
#                          step counted under cudasim: the same runs check.sh counts on the
#                          card (tools/gpu/apicount/count.sh), here on simulated GPUs, so the
#                          card's counts have cudasim's beside them (--no-sim-counts: skip);
#   fashion-mnist/  the four IDX files of Debian's dataset-fashion-mnist;
#   fortunes/       the corpus //examples:char_gpt reads (Debian's fortunes: its files without
#                   a '.' in their names), for check.sh's gpt2 step;
#   peers/          bench/peers' PyTorch scripts, which check.sh runs on the same card.
# At most 60 MiB in all (checked). check.sh unpacks it, finds the CUDA libraries where the
# machine keeps them, and puts lib/ after them on the loader's path, so a library the machine
# has is never shadowed.
#
# --cudasim builds the same targets with --config=cudasim instead (the CUDA code on simulated
# GPUs, no CUDA library needed), linked as the test suite links them (the project's own shared
# libraries then travel in lib/ too): CI packs and dry-runs check.sh with it, reusing the
# suite's build, so neither script rots.
set -euo pipefail
cd "$(dirname "$0")/../.."

config=cuda
link=(--dynamic_mode=off)
sim_counts=1
while [[ "${1:-}" == --* ]]; do
  case $1 in
    --cudasim) config=cudasim link=() ;;
    --no-sim-counts) sim_counts=0 ;;
    *) echo "pack.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
out=${1:-.gpu}
limit_mib=60

# The one-process GPU tests: gpu-tagged cc_tests (sh_tests and the MPI ones start other
# processes), the main job and the GPU benchmark.
query='kind(cc_test, attr(tags, "gpu", tests(//tests/...))) except attr(tags, "mpi", //tests/...)'
mapfile -t tests < <(tools/bazel query "$query" 2>/dev/null | sort)
targets=("${tests[@]}" //examples:fashion_mnist //examples:char_gpt)
[[ "$config" == cuda ]] && targets+=(//tests/cuda:cuda_bench)  # cuDNN: a real build only
preload_label=//tools/gpu/apicount:libpw_apicount.so
echo "pack.sh: building ${#targets[@]} targets and the API-count library with --config=$config ${link[*]}" >&2
tools/bazel build --config="$config" "${link[@]}" "${targets[@]}" "$preload_label" >&2
bin_dir=$(tools/bazel info --config="$config" "${link[@]}" bazel-bin 2>/dev/null)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/preload"
cp "$bin_dir/tools/gpu/apicount/libpw_apicount.so" "$stage/preload/"
chmod u+w "$stage/preload/libpw_apicount.so"
built=()
for label in "${targets[@]}"; do
  path=${label#//}
  path=${path/://}
  built+=("$bin_dir/$path")
  name=${path//\//_}  # //tests/cuda:gemm_test -> tests_cuda_gemm_test
  cp "$bin_dir/$path" "$stage/bin/$name"
  chmod u+w "$stage/bin/$name"
  strip --strip-unneeded "$stage/bin/$name"
done
# //examples:fashion_mnist builds in every configuration, into one output tree: a Bazel command
# of another configuration run meanwhile (another shell in this workspace) relinks it there.
# The copy must be this configuration's: cudasim's exports its runtime, cuda's loads libcudart.
main_copy=$stage/bin/examples_fashion_mnist
if [[ "$config" == cudasim ]]; then
  grep -q 'cudasim.*api_counts' <(nm -D "$main_copy") && main_ok=1 || main_ok=0
else
  grep -q '__cudaLaunchKernel' <(nm -D "$main_copy") && main_ok=1 || main_ok=0
fi
if ((!main_ok)); then
  echo "pack.sh: bazel-bin's fashion_mnist is not the --config=$config build (another Bazel command" \
    "relinked it meanwhile): pack again" >&2
  exit 1
fi

# Libraries the GPU machine brings itself: the CUDA ones, and the C/C++ runtime. ldd runs on
# the binaries where Bazel put them, so that their runpaths resolve.
provided='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvidia-[a-z-]*|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64|linux-vdso)\.so'
missing=$(ldd "${built[@]}" | grep "not found" | sort -u || true)
if [[ -n "$missing" ]]; then
  echo "pack.sh: libraries not found here: $missing" >&2
  exit 1
fi
for binary in "${built[@]}"; do
  ldd "$binary" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ "$soname" =~ $provided ]] && continue
  cp -L "$path" "$stage/lib/$soname"
  chmod u+w "$stage/lib/$soname"
done
strip --strip-unneeded "$stage"/lib/* 2>/dev/null || true

{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!.gpu' || echo ' (with uncommitted changes)')"
  echo "config --config=$config ${link[*]}"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  printf 'target %s\n' "${targets[@]}"
} >"$stage/MANIFEST"

# What cudasim counts for the runs check.sh's apicount step makes on the card: the same main
# job built with --config=cudasim, the same script; about 15 s of runs.
packed=(bin lib preload MANIFEST)
if [[ "$config" == cuda ]] && ((sim_counts)); then
  echo "pack.sh: counting a warm step's CUDA calls under cudasim (tools/gpu/apicount/count.sh)" >&2
  sim_dir=$stage/cudasim
  mkdir -p "$sim_dir"
  # Copied out of bazel-bin at once: the cudasim build shares the default build's output tree,
  # which another Bazel command may relink meanwhile.
  if tools/bazel build --config=cudasim //examples:fashion_mnist "$preload_label" >&2 &&
      sim_bin=$(tools/bazel info --config=cudasim bazel-bin 2>/dev/null) &&
      cp "$sim_bin/examples/fashion_mnist" "$sim_bin/tools/gpu/apicount/libpw_apicount.so" "$sim_dir/" &&
      grep -q 'cudasim.*api_counts' <(nm -D "$sim_dir/fashion_mnist"); then
    if tools/gpu/apicount/count.sh "$sim_dir/steps.txt" "$sim_dir/fashion_mnist" \
        "$sim_dir/libpw_apicount.so"; then
      { echo "# cudasim counts: --config=cudasim, $(head -n 1 "$stage/MANIFEST"), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        cat "$sim_dir/steps.txt"; } >"$stage/apicount-cudasim.txt"
      packed+=(apicount-cudasim.txt)
    else
      echo "pack.sh: the cudasim count failed:" >&2
      grep '^# .*exit status' "$sim_dir/steps.txt" >&2
      tail -n 5 "$sim_dir"/apicount.*.log >&2
      echo "pack.sh: the bundle has no cudasim counts" >&2
    fi
  else
    echo "pack.sh: the cudasim build failed (or another Bazel command relinked it meanwhile);" \
      "the bundle has no cudasim counts" >&2
  fi
fi

rm -rf "$out"
mkdir -p "$out/fashion-mnist" "$out/peers" "$out/fortunes"
# One xz dictionary over the whole tar (320 MiB): the statically linked binaries share most of
# their bytes (the project's code and its kernels' fatbins, ~12 MB each), which a default 8 MiB
# dictionary cannot reach from one binary to the next: 52 MiB became 13 MiB on 2026-12-02.
# Unpacking needs 320 MiB of memory, as xz -d always does for the dictionary it was given.
tar -C "$stage" -cf - "${packed[@]}" | xz -T1 --lzma2=preset=6,dict=320MiB >"$out/bundle.tar.xz"
cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$out/fashion-mnist/"
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' -exec cp {} "$out/fortunes/" \;
cp bench/peers/*.py "$out/peers/"

size_mib=$(($(du -sb "$out" | cut -f1) / 1048576))
echo "pack.sh: $out holds ${#targets[@]} binaries, $(ls "$stage/lib" | wc -l) libraries and the data: ${size_mib} MiB" >&2
if ((size_mib > limit_mib)); then
  echo "pack.sh: $out is ${size_mib} MiB, over the ${limit_mib} MiB the device machine takes" >&2
  exit 1
fi
