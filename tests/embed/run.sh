#!/usr/bin/env bash
# pipewright used from another Bazel workspace, built from the documents alone, as a user
# would: a project directory next to a link to this checkout, holding the README's "Use it in
# your project" files verbatim (WORKSPACE, .bazelrc, BUILD.bazel) and docs/first_program.md's
# program as train.cc, all cut out of the documents by tools/doc_snippets.sh. Then:
#   1. `bazel run //:train` builds it against @pipewright//:pipewright and runs it (it exits
#      non-zero unless it learned and its saved weights load back);
#   2. an internal target (@pipewright//pipeline:cell) is not visible there (tests/embed/fence,
#      copied in as //fence).
#
#   <dir>/pipewright -> this checkout        <dir> = $PIPEWRIGHT_EMBED_DIR, by default
#   <dir>/project/  WORKSPACE .bazelrc BUILD.bazel train.cc fence/     /tmp/pipewright-embed-UID
#   <dir>/output_base/                        the nested Bazel's (kept: later runs are quick)
#
# A nested Bazel with its own output base, so it is a .ci/run step, not a bazel test.
# Extra arguments go to the nested Bazel commands (e.g. --disk_cache=DIR).
# Ends with one line in Bazel's result format, which .ci/run counts:
#   //tests/embed:separate_workspace   PASSED   (or FAILED)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${PIPEWRIGHT_EMBED_DIR:-/tmp/pipewright-embed-$(id -u)}
project=$dir/project
nested() { (cd "$project" && "$root/tools/bazel" --output_base="$dir/output_base" "$@"); }

status=PASSED
rm -rf "$project" && mkdir -p "$project" && ln -sfn "$root" "$dir/pipewright" || exit 1
cut_out() {  # cut_out NAME DOCUMENT FILE
  "$root/tools/doc_snippets.sh" block "$1" "$root/$2" > "$project/$3" || {
    echo "embed: $2 has no block marked <!-- snippet: $1 -->"
    status=FAILED
  }
}
cut_out WORKSPACE README.md WORKSPACE
cut_out .bazelrc README.md .bazelrc
cut_out BUILD.bazel README.md BUILD.bazel
cut_out first_program docs/first_program.md train.cc
cp -r "$root/tests/embed/fence" "$project/fence"

# The nested output is indented so that only the last line reads as a top-level result.
nested run //:train "$@" --symlink_prefix=/ 2>&1 | sed 's/^/  embed| /'
if [[ ${PIPESTATUS[0]} -ne 0 ]]; then
  echo "embed: the first program failed to build or run in the separate workspace"
  status=FAILED
fi
err=$(nested build //fence:uses_internal "$@" --symlink_prefix=/ 2>&1)
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
