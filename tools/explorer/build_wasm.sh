#!/usr/bin/env bash
# Compiles the schedule explorer's C++ (the schedule library, Trace's reader and writer, and
# explorer_api) to WebAssembly with Debian's emscripten: build_wasm.sh OUT.js SOURCES...
# writes OUT.js (the loader, createExplorer()) and OUT.wasm beside it. Called by the
# //tools/explorer:explorer_wasm genrule, from the execution root (sources relative to it).
set -euo pipefail
out_js=$1
shift
command -v emcc >/dev/null || {
  echo "build_wasm.sh: emcc not found: install Debian's emscripten (tools/bazel does)" >&2
  exit 1
}
sources=()
for f in "$@"; do [[ "$f" == *.cc ]] && sources+=("$f"); done
# nlohmann-json is header-only; give emcc its directory alone, not the host's /usr/include.
include=$(mktemp -d)
trap 'rm -rf "$include"' EXIT
ln -s /usr/include/nlohmann "$include/nlohmann"
# Debian's emscripten finds its JavaScript helpers (acorn) among Debian's node modules; a
# Node.js from elsewhere (NodeSource) does not look there by itself.
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
# JavaScript exceptions (-fexceptions): the library reports every refusal by throwing, and
# explore_json turns each into the page's error message.
emcc -O2 -std=c++20 -fexceptions -I. -isystem "$include" "${sources[@]}" -o "$out_js" \
  -sMODULARIZE=1 -sEXPORT_NAME=createExplorer -sENVIRONMENT=web \
  -sALLOW_MEMORY_GROWTH=1 -sFILESYSTEM=0 \
  -sEXPORTED_FUNCTIONS=_pw_schedules,_pw_explore,_pw_trace,_pw_free \
  -sEXPORTED_RUNTIME_METHODS=ccall,UTF8ToString
