#!/usr/bin/env bash
# pipewright used from another Bazel workspace (tests/embed/workspace/, a user's project in
# miniature: local_repository to this checkout, the README's WORKSPACE and .bazelrc lines):
#   1. its test builds against @pipewright//:pipewright and trains a two-stage Pipe;
#   2. an internal target (@pipewright//pipeline:cell) is not visible to it.
# Runs a nested Bazel with its own output base, so it is a .ci/run step, not a bazel test.
# Extra arguments go to the nested `bazel test` (e.g. --disk_cache=DIR).
# Ends with one line in Bazel's result format, which .ci/run counts:
#   //tests/embed:separate_workspace   PASSED   (or FAILED)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
output_base=${PIPEWRIGHT_EMBED_OUTPUT_BASE:-/tmp/pipewright-embed-$(id -u)}
cd "$root/tests/embed/workspace" || exit 1
nested() { "$root/tools/bazel" --output_base="$output_base" "$@" --symlink_prefix=/; }

status=PASSED
# The nested results are indented so that only the last line reads as a top-level result.
nested test //... "$@" 2>&1 | sed 's/^/  embed| /'
if [[ ${PIPESTATUS[0]} -ne 0 ]]; then
  echo "embed: the separate workspace's test failed"
  status=FAILED
fi
err=$(nested build //fence:uses_internal "$@" 2>&1)
if [[ $? -eq 0 ]]; then
  echo "embed: //fence:uses_internal built, but @pipewright//pipeline:cell should be internal"
  status=FAILED
elif ! grep -q "is not visible" <<<"$err"; then
  echo "embed: //fence:uses_internal failed for another reason than visibility:"
  sed 's/^/  embed| /' <<<"$err"
  status=FAILED
fi
nested shutdown >/dev/null 2>&1  # no second Bazel server left running
echo "//tests/embed:separate_workspace                                       $status"
[[ $status == PASSED ]]
