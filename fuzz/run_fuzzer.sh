#!/usr/bin/env bash
# Runs one fuzz target (see fuzz.bzl) from its seed corpus. Called by `tools/bazel run` as
#   run_fuzzer.sh <binary> <seed dir> <target name> [libFuzzer flags...]
# New inputs go to a writable corpus, ${PIPEWRIGHT_FUZZ_DIR:-/tmp/pipewright-fuzz}/<target>,
# kept between runs; crash reproducers go to the directory `tools/bazel run` was called from.
set -euo pipefail
bin=$1 seeds=$2 target=$3
shift 3
work=${PIPEWRIGHT_FUZZ_DIR:-/tmp/pipewright-fuzz}/$target
mkdir -p "$work"
artifacts=${BUILD_WORKING_DIRECTORY:-$PWD}/
exec "$bin" -artifact_prefix="$artifacts$target-" "$work" "$seeds" "$@"
