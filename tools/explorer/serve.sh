#!/usr/bin/env bash
# tools/bazel run //tools/explorer [-- --port N]: serves the schedule explorer (docs/explorer and
# the WebAssembly module built beside this script) on 127.0.0.1 and prints its address.
set -euo pipefail
# bazel run starts us in our runfiles tree (the workspace's files by their paths); run by hand
# from bazel-bin, find it beside us.
if [[ ! -f tools/explorer/serve.mjs ]]; then
  cd "$0.runfiles/pipewright"
fi
command -v node >/dev/null || { echo "explorer: node not found (Debian's nodejs)" >&2; exit 1; }
exec node tools/explorer/serve.mjs "$@" docs/explorer tools/explorer
