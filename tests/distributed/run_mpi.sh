#!/usr/bin/env bash
# Runs a test program under mpirun on localhost and fails when it fails or outlives the
# time limit (so a hang fails the test instead of blocking CI).
#
#   run_mpi.sh <ranks> <seconds> <program> [args...]
#
# The flags this machine kind needs: running as root (containers) and more ranks than
# cores (--oversubscribe); OpenMPI's shared-memory transport only (no network probing).
set -uo pipefail
ranks=$1 seconds=$2 program=$3
shift 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
# Bazel's sandbox gives every test its own PID namespace, so concurrent mpiruns get the same
# PID and hence the same job id: their session directories (/tmp) and shared-memory files
# (/dev/shm) would collide. Each test keeps both in its own temporary directory.
scratch="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
export OMPI_MCA_orte_tmpdir_base="$scratch" OMPI_MCA_btl_vader_backing_directory="$scratch"
# Under --config=tsan: OpenMPI is not instrumented, so TSan cannot see that MPI_Test's
# completion orders the communication thread's progress (which writes a receive buffer
# inside libmpi) before the worker that reads it; ignore accesses made inside such libraries.
if [[ -n "${TSAN_OPTIONS:-}" ]]; then export TSAN_OPTIONS="$TSAN_OPTIONS:ignore_noninstrumented_modules=1"; fi
start=$SECONDS
timeout --kill-after=10 "$seconds" mpirun -np "$ranks" --oversubscribe "$program" "$@"
rc=$?
if ((SECONDS - start >= seconds)); then
  echo "run_mpi.sh: $program did not end within ${seconds} s" >&2
  exit 124
fi
exit $rc
