#!/usr/bin/env bash
# tools/bazel run //tools/explorer as a user runs it: the server starts on the port asked for
# (0: any), prints its address, serves the page and the WebAssembly module with their types,
# refuses paths outside its folders and anything but GET, and stops on SIGTERM.
set -uo pipefail
cd "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-pipewright}" 2>/dev/null || true
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
out=$(mktemp)
tools/explorer/explorer --port 0 >"$out" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q "open http" "$out" && break; sleep 0.1; done
url=$(grep -o 'http://127.0.0.1:[0-9]*/' "$out")
[[ -n "$url" ]] || { fail "no address printed: $(cat "$out")"; kill $server; exit 1; }

# "METHOD PATH STATUS TYPE" for each request, through Node's fetch (no curl needed).
answers=$(node -e '
  const [url, ...requests] = process.argv.slice(1);
  (async () => {
    for (const r of requests) {
      const [method, path] = r.split(" ");
      const res = await fetch(url + path, { method }).catch((e) => ({ status: "error " + e.message, headers: new Map() }));
      console.log(`${method} /${path} ${res.status} ${res.headers.get("content-type")}`);
    }
  })().then(() => process.exit(0));  // not waiting for idle keep-alive sockets to close
' "$url" "GET " "GET explorer.wasm" "GET explorer.js" "GET app.js" \
  "GET %2e%2e/%2e%2e/tools/explorer/BUILD.bazel" "GET nothing.html" "POST ")
expect() { grep -qxF "$1" <<<"$answers" || fail "want '$1', got: $answers"; }
expect "GET / 200 text/html; charset=utf-8"
expect "GET /explorer.wasm 200 application/wasm"
expect "GET /explorer.js 200 text/javascript; charset=utf-8"
expect "GET /app.js 200 text/javascript; charset=utf-8"
expect "GET /%2e%2e/%2e%2e/tools/explorer/BUILD.bazel 404 text/plain"
expect "GET /nothing.html 404 text/plain"
expect "POST / 405 null"

kill $server
wait $server 2>/dev/null
((failures == 0)) && echo "explorer_serve_test: all checks passed"
exit $((failures > 0))
