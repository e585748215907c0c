#!/usr/bin/env bash
# Runs explorer_browser_test.mjs (the schedule explorer in headless Chromium) from the runfiles
# tree: explorer_browser_test.sh SCHEDULE_SVG.
set -euo pipefail
cd "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-pipewright}" 2>/dev/null || true
export HOME=${TEST_TMPDIR:-$(mktemp -d)}  # Chromium writes its caches under $HOME
exec node tests/tools/explorer_browser_test.mjs "$1" docs/explorer tools/explorer
