#!/usr/bin/env bash
# Builds the GPU bundle: everything tools/gpu/check.sh runs on a machine that has a GPU but no
# Bazel, no apt and no network (docs/cuda.md, "Running on a GPU machine without Bazel").
#
#   tools/gpu/pack.sh [--cudasim] [OUTDIR]      (OUTDIR default: .gpu, git-ignored)
#
# What goes in OUTDIR:
#   bundle.tar.xz   bin/   every one-process gpu-tagged test, //examples:fashion_mnist and
#                          //tests/cuda:cuda_bench, built with --config=cuda and the project
#                          linked statically (--dynamic_mode=off), stripped;
#                   lib/   the shared libraries they load that a GPU machine may lack (ldd:
#                          OpenMPI, OpenBLAS, libgfortran, libgomp, hwloc, ...), never the CUDA
#                          libraries (libcudart, libcublas, libcublasLt, libcudnn, libnccl,
#                          libcuda: the machine has its own) nor the C and C++ runtimes;
#                   MANIFEST the labels, the commit and the build configuration;
#   fashion-mnist/  the four IDX files of Debian's dataset-fashion-mnist;
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
if [[ "${1:-}" == "--cudasim" ]]; then
  config=cudasim
  link=()
  shift
fi
out=${1:-.gpu}
limit_mib=60

# The one-process GPU tests: gpu-tagged cc_tests (sh_tests and the MPI ones start other
# processes), the main job and the GPU benchmark.
query='kind(cc_test, attr(tags, "gpu", tests(//tests/...))) except attr(tags, "mpi", //tests/...)'
mapfile -t tests < <(tools/bazel query "$query" 2>/dev/null | sort)
targets=("${tests[@]}" //examples:fashion_mnist)
[[ "$config" == cuda ]] && targets+=(//tests/cuda:cuda_bench)  # cuDNN: a real build only
echo "pack.sh: building ${#targets[@]} targets with --config=$config ${link[*]}" >&2
tools/bazel build --config="$config" "${link[@]}" "${targets[@]}" >&2
bin_dir=$(tools/bazel info --config="$config" "${link[@]}" bazel-bin 2>/dev/null)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
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

rm -rf "$out"
mkdir -p "$out/fashion-mnist" "$out/peers"
tar -C "$stage" -cJf "$out/bundle.tar.xz" bin lib MANIFEST
cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$out/fashion-mnist/"
cp bench/peers/*.py "$out/peers/"

size_mib=$(($(du -sb "$out" | cut -f1) / 1048576))
echo "pack.sh: $out holds ${#targets[@]} binaries, $(ls "$stage/lib" | wc -l) libraries and the data: ${size_mib} MiB" >&2
if ((size_mib > limit_mib)); then
  echo "pack.sh: $out is ${size_mib} MiB, over the ${limit_mib} MiB the device machine takes" >&2
  exit 1
fi
