#!/usr/bin/env bash
# tests/compare.h in a failing CHECK: each of compare_failure_demo's test cases (1,000,000
# elements) must fail, print under 2048 bytes in all, and name the mismatch count, the first
# index and the largest difference (or the sizes).
#   compare_output_test.sh <compare_failure_demo>
set -uo pipefail
demo=$1
failures=0

# expect CASE PATTERN...: CASE fails, its output is < 2048 bytes and matches every PATTERN.
expect() {
  local case=$1 out status size
  shift
  out=$("$demo" "$case" 2>&1)
  status=$?
  size=${#out}
  if [[ $status -eq 0 ]]; then
    echo "FAIL: '$case' passed; it must fail"
    failures=$((failures + 1))
  fi
  if ((size >= 2048)); then
    echo "FAIL: '$case' printed $size bytes (limit 2047):"
    echo "${out:0:3000}"
    failures=$((failures + 1))
  fi
  for pattern in "$@"; do
    if ! grep -qF -- "$pattern" <<<"$out"; then
      echo "FAIL: the output of '$case' lacks '$pattern':"
      echo "${out:0:3000}"
      failures=$((failures + 1))
    fi
  done
  echo "'$case': exit $status, $size bytes"
}

expect "vectors of 1M elements differing in many places" \
  "std::vector<double>: 666666 of 1000000 elements differ (==)" \
  "first at 1: a 0.25, b -0.25" \
  "largest |a - b| 499999 at 999998: a 249999.5, b -249999.5"
expect "vectors of different sizes" \
  "std::vector<double>: sizes differ: 1000000 vs 999999 elements"
expect "tensors of 1M elements differing in many places" \
  "float64 [1000, 1000]: 666666 of 1000000 elements differ (bitwise)" \
  "first at 1 = [0, 1]:" \
  "a 0.25 (0x3fd0000000000000)" \
  "b -0.25 (0xbfd0000000000000)" \
  "largest |a - b| 499999 at 999998 = [999, 998]:"

if ((failures > 0)); then
  echo "compare_output_test: $failures failures"
  exit 1
fi
echo "compare_output_test: PASSED"
