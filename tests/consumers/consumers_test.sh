#!/usr/bin/env bash
# pipewright installed, then used by a CMake project and by a Makefile through pkg-config, as
# README's "Use it in your project" says (tests/consumers/first_program: CMakeLists.txt,
# Makefile, and docs/first_program.md's program as train.cc, each the documents' block
# verbatim). Checks, in order:
#   1. the project's files are the documents' blocks;
#   2. README's install-and-CMake commands run as written (the install through //:install's
#      script, paths under the test's directory), and the program prints exactly what the
#      Bazel-built one (:bazel_first_program) prints;
#   3. the tree: the files README promises, no build-tree path in any of them, libpipewright
#      without MPI, the version everywhere;
#   4. moved elsewhere, the tree still serves: find_package's versions and components, CMake
#      with the static archives, the Makefile with pkg-config (README's commands), both
#      printing the same again;
#   5. every installed header compiles, all in one file, with pkg-config's flags alone, and
#      libpipewright_mpi links and runs.
# Needs cmake, pkg-config and make (tools/bazel installs them).
#
#   consumers_test.sh INSTALL TARBALL BAZEL_PROGRAM VERSION
set -uo pipefail
install=$PWD/$1 tarball=$PWD/$2 bazel_program=$PWD/$3 version=$4
t=${TEST_TMPDIR:-$(mktemp -d)}
export HOME=$t TMPDIR=$t/tmp  # the program saves its weights under TMPDIR: one place for all
mkdir -p "$TMPDIR"
fail() {
  echo "FAILED: $1"
  [[ -n ${2:-} && -f $2 ]] && tail -n 40 "$2"
  exit 1
}
block() { tools/doc_snippets.sh block "$1" "$2"; }
# readme_commands NAME PREFIX DIR: README's shell block NAME with its install run through
# //:install's script, /tmp/pipewright as PREFIX and any other /tmp/ as DIR/.
readme_commands() {
  local c
  c=$(block "$1" README.md | sed -e 's|tools/bazel run //:install --|@INSTALL@|' \
    -e 's|/tmp/pipewright|@PREFIX@|g' -e 's|/tmp/|@DIR@/|g')
  c=${c//@INSTALL@/\"$install\" \"$tarball\"}
  c=${c//@PREFIX@/$2}
  printf '%s\n' "${c//@DIR@/$3}"
}

echo "== 1. tests/consumers/first_program is the documents' blocks"
project=tests/consumers/first_program
diff <(block first_program docs/first_program.md) $project/train.cc >/dev/null ||
  fail "$project/train.cc differs from docs/first_program.md's program; copy it again:
  tools/doc_snippets.sh block first_program docs/first_program.md > $project/train.cc"
for file in CMakeLists.txt Makefile; do
  diff <(block "$file" README.md) "$project/$file" ||
    fail "$project/$file differs from README's block marked <!-- snippet: $file -->"
done

expected=$("$bazel_program") || fail "the Bazel-built first program failed: $expected"
same_output() {  # same_output WHAT PROGRAM: it prints exactly what the Bazel-built one prints
  local got
  got=$("$2" 2>&1) || fail "$1: the program failed: $got"
  [[ $got == "$expected" ]] || fail "$1 printed other than the Bazel build:
$(diff <(echo "$expected") <(echo "$got"))"
  echo "$1: the same output as the Bazel build"
}

echo "== 2. README's install and CMake commands, as written"
readme=$t/readme
mkdir -p "$readme"
prefix=$readme/pipewright
commands=$(readme_commands install "$prefix" "$readme")
bash -euo pipefail -c "$commands" >"$t/readme.log" 2>&1 ||
  fail "README's commands failed:
$commands" "$t/readme.log"
[[ $(tail -n "$(wc -l <<<"$expected")" "$t/readme.log") == "$expected" ]] ||
  fail "README's commands did not end with the first program's output" "$t/readme.log"
program=$(tail -n 1 <<<"$commands" | sed 's|.*&& ||')
[[ -d $prefix && -x $program ]] || fail "README's commands: no $prefix or $program"
same_output "CMake (shared library)" "$program"
grep -q "NEEDED.*libpipewright.so.$version" <<<"$(readelf -d "$program")" ||
  fail "the CMake program does not load libpipewright.so.$version"

echo "== 3. the installed tree"
cd "$prefix" || fail "no $prefix"
for f in include/pipewright/version.h include/pipeline/pipe.h include/nn/linear.h \
    include/tensor/tensor.h include/distributed/mpi_processes.h lib/libpipewright.a \
    lib/libpipewright.so "lib/libpipewright.so.$version" lib/libpipewright_mpi.a \
    lib/libpipewright_mpi.so "lib/libpipewright_mpi.so.$version" lib/pkgconfig/pipewright.pc \
    lib/pkgconfig/pipewright-mpi.pc lib/cmake/pipewright/pipewrightConfig.cmake \
    lib/cmake/pipewright/pipewrightConfigVersion.cmake share/doc/pipewright/CHANGELOG.md; do
  [[ -e $f ]] || fail "the install has no $f"
done
stray=$(find include -path '*third_party*' -o -path '*tests*' -o -path '*cudasim*' -o \
  -name '*_test*' -o -path '*tensor/cpu/common.h' -o -type f ! -name '*.h')
[[ -z $stray ]] || fail "the install has headers it should not: $stray"
leaks=$(grep -rlE 'bazel-out|execroot|_bazel_|\.runfiles|/sandbox/' lib/pkgconfig lib/cmake)
[[ -z $leaks ]] || fail "build-tree paths in: $leaks"
for so in lib/libpipewright.so."$version" lib/libpipewright_mpi.so."$version"; do
  dynamic=$(readelf -d "$so")
  grep -E 'RUNPATH|RPATH|NEEDED' <<<"$dynamic" | grep -E 'bazel|_solib|execroot|runfiles' &&
    fail "$so names the build tree"
done
grep -qi 'NEEDED.*mpi' <<<"$(readelf -d "lib/libpipewright.so.$version")" &&
  fail "libpipewright.so needs MPI"
# shellcheck disable=SC2016  # $ORIGIN is the dynamic loader's
grep -q 'RUNPATH.*\$ORIGIN' <<<"$(readelf -d "lib/libpipewright_mpi.so.$version")" ||
  fail "libpipewright_mpi.so has no \$ORIGIN run path (to find libpipewright.so)"
grep -q "^Version: $version$" lib/pkgconfig/pipewright.pc ||
  fail "pipewright.pc: not version $version"
grep -q "PACKAGE_VERSION \"$version\"" lib/cmake/pipewright/pipewrightConfigVersion.cmake ||
  fail "pipewrightConfigVersion.cmake: not version $version"
grep -q "#define PIPEWRIGHT_VERSION \"$version\"" include/pipewright/version.h ||
  fail "pipewright/version.h: not version $version"
cd - >/dev/null || exit 1

echo "== 4. the tree moved: CMake's versions and components, the static archives, the Makefile"
moved=$t/elsewhere/pipewright
mkdir -p "$(dirname "$moved")"
mv "$prefix" "$moved" || fail "cannot move the install"
next=${version%%.*}.$(($(cut -d. -f2 <<<"$version") + 1))
mkdir -p "$t/versions"
cat >"$t/versions/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(versions LANGUAGES CXX)
find_package(pipewright ${version%.*} REQUIRED COMPONENTS mpi)
if(NOT TARGET pipewright::mpi OR NOT pipewright_VERSION STREQUAL "$version")
  message(FATAL_ERROR "pipewright \${pipewright_VERSION} without pipewright::mpi")
endif()
find_package(pipewright $next QUIET)
if(pipewright_FOUND)
  message(FATAL_ERROR "pipewright $version taken for $next")
endif()
find_package(pipewright QUIET COMPONENTS nothing)
if(pipewright_FOUND)
  message(FATAL_ERROR "pipewright found with a component it does not have")
endif()
EOF
cmake -S "$t/versions" -B "$t/versions/build" -DCMAKE_PREFIX_PATH="$moved" \
  >"$t/versions.log" 2>&1 || fail "find_package's versions and components" "$t/versions.log"
if ! cmake -S $project -B "$t/static" -DCMAKE_PREFIX_PATH="$moved" -Dpipewright_STATIC=ON \
    >"$t/static.log" 2>&1 || ! cmake --build "$t/static" >>"$t/static.log" 2>&1; then
  fail "CMake with pipewright_STATIC=ON" "$t/static.log"
fi
grep -q 'NEEDED.*pipewright' <<<"$(readelf -d "$t/static/train")" &&
  fail "pipewright_STATIC=ON linked the shared library"
same_output "CMake (static archives)" "$t/static/train"

commands=$(readme_commands pkg-config "$moved" "$t")
bash -euo pipefail -c "$commands" >"$t/make.log" 2>&1 ||
  fail "README's pkg-config commands failed:
$commands" "$t/make.log"
same_output "Makefile + pkg-config" "$(tail -n 1 <<<"$commands" | sed 's|.*&& ||')"

echo "== 5. every installed header, with pkg-config's flags alone; libpipewright_mpi"
export PKG_CONFIG_PATH=$moved/lib/pkgconfig
(cd "$moved/include" && find . -name '*.h' | sort | sed 's|^\./\(.*\)|#include "\1"|') \
  >"$t/all_headers.cc"
cat >>"$t/all_headers.cc" <<'EOF'
#include <cstdio>
int main() {
  std::printf("pipewright %s, under mpirun: %d\n", PIPEWRIGHT_VERSION,
              pipewright::distributed::launched_by_mpirun());
}
EOF
# shellcheck disable=SC2046  # pkg-config's flags are words
g++ $(pkg-config --cflags pipewright-mpi) "$t/all_headers.cc" -o "$t/all_headers" \
  -Wl,-rpath,"$moved/lib" $(pkg-config --libs pipewright-mpi) >"$t/all_headers.log" 2>&1 ||
  fail "the installed headers do not compile with pkg-config's flags alone" "$t/all_headers.log"
[[ $("$t/all_headers") == "pipewright $version, under mpirun: 0" ]] ||
  fail "the MPI program printed: $("$t/all_headers" 2>&1)"
echo "$(grep -c '^#include "' "$t/all_headers.cc") headers compile together; libpipewright_mpi runs"
echo PASSED
