#!/usr/bin/env bash
# Whole runs of several builds of one program, interleaved run by run (each round starting one
# build later, so no build always follows the same one) so that a change of load hits every
# build alike; prints each build's median wall time (process start and library loading
# included) and its ratio to the first build's. docs/BENCHMARKS.md, "Installed package":
#
#   bench/installed_speed.sh 101 bazel-bin/tests/consumers/bazel_first_program \
#       /tmp/first_program/train /tmp/train/train
set -euo pipefail
(($# >= 2)) || { echo "usage: $0 ROUNDS PROGRAM..." >&2; exit 2; }
rounds=$1
shift
programs=("$@")
declare -A times
for ((round = 0; round < rounds; round++)); do
  for ((i = 0; i < $#; i++)); do
    program=${programs[(round + i) % $#]}
    start=$(date +%s%N)
    "$program" >/dev/null
    end=$(date +%s%N)
    times[$program]+="$(((end - start) / 1000)) "
  done
done
median() {
  tr ' ' '\n' | grep . | sort -n |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
first=$(median <<<"${times[$1]}")
printf '%-60s %12s %8s\n' program "median ms" ratio
for program in "$@"; do
  m=$(median <<<"${times[$program]}")
  awk -v p="$program" -v m="$m" -v f="$first" \
    'BEGIN {printf "%-60s %12.1f %8.3f\n", p, m / 1000, m / f}'
done
