#!/usr/bin/env bash
# The version of release/version.bzl, where it must show: pipewright/version.h, a CHANGELOG.md
# heading `## VERSION`, and every example's --version ("pipewright VERSION").
#
#   version_test.sh VERSION VERSION_H CHANGELOG EXAMPLE...
set -uo pipefail
version=$1 header=$2 changelog=$3
shift 3
fail() { echo "FAILED: $1"; exit 1; }

grep -qx "#define PIPEWRIGHT_VERSION \"$version\"" "$header" ||
  fail "$header does not define PIPEWRIGHT_VERSION \"$version\":
$(grep PIPEWRIGHT_VERSION "$header")"
grep -qE "^## $version( |$)" "$changelog" ||
  fail "CHANGELOG.md has no heading '## $version' for release/version.bzl's version"
for example in "$@"; do
  got=$("$example" --version 2>&1)
  [[ $got == "pipewright $version" ]] || fail "$(basename "$example") --version printed: $got"
done
echo "version $version: pipewright/version.h, CHANGELOG.md and $# examples' --version agree"
echo PASSED
