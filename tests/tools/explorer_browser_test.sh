#!/usr/bin/env bash
# Runs explorer_browser_test.mjs (the schedule explorer in headless Chromium) from the runfiles
# tree: explorer_browser_test.sh SCHEDULE_SVG.
set -euo pipefail
cd "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-pipewright}" 2>/dev/null || true
export HOME=${TEST_TMPDIR:-$(mktemp -d)}  # Chromium writes its caches under $HOME
# Node 22 has a WebSocket client built in; Node 20 behind a flag.
flags=()
node -e 'process.exit(typeof WebSocket === "function" ? 0 : 1)' || flags=(--experimental-websocket)
exec node "${flags[@]}" tests/tools/explorer_browser_test.mjs "$1" docs/explorer tools/explorer
