#!/usr/bin/env bash
# Exercises tools/bazel's package check against fake system commands. Each case builds a
# directory of fakes that log their arguments to $LOG, puts it first on PATH, runs the wrapper
# and checks the exit status, the log and the messages.
set -uo pipefail

wrapper="$TEST_SRCDIR/$TEST_WORKSPACE/tools/bazel"
[[ -f "$wrapper" ]] || wrapper="$(pwd)/tools/bazel"
failures=0
fail() { echo "FAIL [$case]: $*"; failures=$((failures + 1)); }

# setup <uid> <sudo: yes|no> <missing package...>: fakes in a fresh $FAKE, log in $LOG.
setup() {
  local uid=$1 with_sudo=$2; shift 2
  FAKE=$(mktemp -d "${TEST_TMPDIR:-/tmp}/fake.XXXXXX")
  LOG="$FAKE/log"
  : >"$LOG"
  printf '%s\n' "$@" >"$FAKE/missing"
  cat >"$FAKE/dpkg-query" <<FAKE_EOF
#!/usr/bin/env bash
pkg="\${@: -1}"
if grep -qx "\$pkg" "$FAKE/missing"; then echo -n "not-installed"; else echo -n "installed"; fi
FAKE_EOF
  cat >"$FAKE/apt-get" <<FAKE_EOF
#!/usr/bin/env bash
echo "apt-get \$*" >>"$LOG"
FAKE_EOF
  cat >"$FAKE/id" <<FAKE_EOF
#!/usr/bin/env bash
echo $uid
FAKE_EOF
  if [[ $with_sudo == yes ]]; then
    cat >"$FAKE/sudo" <<FAKE_EOF
#!/usr/bin/env bash
[[ "\$1" == "-n" ]] && { shift; [[ "\$1" == "true" ]] && exit 0; }
echo "sudo \$1" >>"$LOG"
"\$@"
FAKE_EOF
  fi
  cat >"$FAKE/bazel-real" <<FAKE_EOF
#!/usr/bin/env bash
echo "bazel \$*" >>"$LOG"
FAKE_EOF
  chmod +x "$FAKE"/*
}

# basic_tools: $FAKE/tools holding the basic commands the wrapper needs; prints its path.
basic_tools() {
  local tools="$FAKE/tools"
  mkdir -p "$tools"
  for t in bash grep cat echo mktemp env printf true; do
    local p; p=$(command -v "$t" 2>/dev/null) && [[ $p == /* ]] && ln -sf "$p" "$tools/$t"
  done
  echo "$tools"
}

# run: the wrapper with the fakes first on PATH; sudo is only found in $FAKE (the system's
# own sudo, if any, is hidden by a PATH without /usr/bin's sudo: we keep only the fake dir
# plus a directory holding the basic tools the wrapper needs).
run() {
  local tools; tools=$(basic_tools)
  local args=("$@")
  ((${#args[@]})) || args=(test //some:target)
  OUT=$(PATH="$FAKE:$tools" BAZEL_REAL="$FAKE/bazel-real" "$wrapper" \
    "${args[@]}" 2>&1)
  RC=$?
}

case="all installed: no apt, bazel gets the arguments"
setup 1000 no
run
[[ $RC -eq 0 ]] || fail "exit $RC, output: $OUT"
[[ "$(cat "$LOG")" == "bazel test //some:target" ]] || fail "log: $(cat "$LOG")"

case="root with two packages missing: apt-get installs exactly those, then bazel"
setup 0 no libeigen3-dev dataset-fashion-mnist
run
[[ $RC -eq 0 ]] || fail "exit $RC, output: $OUT"
expected="apt-get update
apt-get install -y --no-install-recommends libeigen3-dev dataset-fashion-mnist
bazel test //some:target"
[[ "$(cat "$LOG")" == "$expected" ]] || fail "log: $(cat "$LOG")"
grep -q "installing missing Debian packages: libeigen3-dev dataset-fashion-mnist" <<<"$OUT" ||
  fail "no message naming the packages: $OUT"

case="not root, sudo available: installs through sudo"
setup 1000 yes catch2
run
[[ $RC -eq 0 ]] || fail "exit $RC, output: $OUT"
grep -q "^sudo bash" "$LOG" || fail "sudo not used: $(cat "$LOG")"
grep -qx "apt-get install -y --no-install-recommends catch2" "$LOG" || fail "log: $(cat "$LOG")"
[[ "$(tail -n1 "$LOG")" == "bazel test //some:target" ]] || fail "bazel not run last: $(cat "$LOG")"

case="not root, no sudo: prints the apt-get line, exits non-zero, runs nothing"
setup 1000 no zlib1g-dev
run
[[ $RC -ne 0 ]] || fail "exit 0"
[[ ! -s "$LOG" ]] || fail "something ran: $(cat "$LOG")"
grep -q "apt-get install -y --no-install-recommends zlib1g-dev" <<<"$OUT" ||
  fail "apt-get line not printed: $OUT"

case="--config=fuzz: clang and libFuzzer are required too, only then"
setup 0 no clang libfuzzer-14-dev
run
[[ "$(cat "$LOG")" == "bazel test //some:target" ]] || fail "apt called without fuzz: $(cat "$LOG")"
: >"$LOG"
run run --config=fuzz //fuzz:idx_fuzzer
grep -qx "apt-get install -y --no-install-recommends clang libfuzzer-14-dev" "$LOG" ||
  fail "clang/libfuzzer not installed: $(cat "$LOG")"
[[ "$(tail -n1 "$LOG")" == "bazel run --config=fuzz //fuzz:idx_fuzzer" ]] ||
  fail "bazel not run last: $(cat "$LOG")"

case="emscripten and chromium: for test and build (the explorer), not for running an example"
setup 0 no emscripten chromium fonts-liberation
run run //examples:fashion_mnist
[[ "$(cat "$LOG")" == "bazel run //examples:fashion_mnist" ]] || fail "apt called for run: $(cat "$LOG")"
: >"$LOG"
run test //...
grep -qx "apt-get install -y --no-install-recommends emscripten chromium fonts-liberation" "$LOG" ||
  fail "emscripten/chromium not installed for test: $(cat "$LOG")"
: >"$LOG"
run run //tools/explorer
grep -qx "apt-get install -y --no-install-recommends emscripten chromium fonts-liberation" "$LOG" ||
  fail "emscripten/chromium not installed to run the explorer: $(cat "$LOG")"

# run_unset <candidates> <args...>: the wrapper without BAZEL_REAL, searching <candidates>.
run_unset() {
  local candidates=$1; shift
  local tools; tools=$(basic_tools)
  OUT=$(env -u BAZEL_REAL PATH="$FAKE:$tools" PIPEWRIGHT_BAZEL_CANDIDATES="$candidates" \
    "$wrapper" "$@" 2>&1)
  RC=$?
}

case="no BAZEL_REAL and no candidate binary: exits 1 naming the problem, runs nothing"
setup 1000 no
run_unset "$FAKE/bazel-4 $FAKE/absent" test //some:target
[[ $RC -eq 1 ]] || fail "exit $RC, output: $OUT"
[[ "$OUT" == "tools/bazel: no Bazel binary found" ]] || fail "output: $OUT"
[[ ! -s "$LOG" ]] || fail "something ran: $(cat "$LOG")"

case="no BAZEL_REAL: the first executable candidate runs with the arguments"
setup 1000 no
run_unset "$FAKE/absent $FAKE/bazel-real" build //a:b
[[ $RC -eq 0 ]] || fail "exit $RC, output: $OUT"
[[ "$(cat "$LOG")" == "bazel build //a:b" ]] || fail "log: $(cat "$LOG")"

echo "$failures failure(s)"
((failures == 0))
