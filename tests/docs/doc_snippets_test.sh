#!/usr/bin/env bash
# tools/doc_snippets.sh on tests/docs/snippets_fixture.md: the C++ it generates (each marked
# C++ block in a namespace of its own, #include lines hoisted once, #line directives naming
# the document's lines, programs called through their main(), the hidden set-up first), a
# block cut out verbatim, and the refusals (an unknown name, a marker without a fence, a
# document without any marked C++ block).
set -uo pipefail
tool=tools/doc_snippets.sh
fixture=tests/docs/snippets_fixture.md
fail() { echo "FAILED: $1"; [[ -n ${2:-} ]] && echo "$2"; exit 1; }

out=$($tool cpp "$fixture") || fail "cpp mode failed on the fixture" "$out"
for expected in 'namespace snippet_1 {' 'void run() {' '#line 12 "tests/docs/snippets_fixture.md"' \
                'std::vector<int> v{1, 2};' 'namespace snippet_2 {' \
                '#line 19 "tests/docs/snippets_fixture.md"' 'const std::string hidden = "set-up";' \
                '#line 21 "tests/docs/snippets_fixture.md"' 'int main() { return 0; }' \
                '{"tests/docs/snippets_fixture.md:11", [] { snippet_1::run(); return 0; }},' \
                '{"tests/docs/snippets_fixture.md:20 (program)", [] { return snippet_2::main(); }},' \
                'std::printf("%d snippets, %d failed\n", 2, failed);'; do
  grep -qF -- "$expected" <<<"$out" || fail "the generated program lacks: $expected" "$out"
done
[[ $(grep -c '^#include <vector>$' <<<"$out") == 1 ]] || fail "#include <vector> not hoisted once" "$out"
[[ $(grep -n '^#include <string>$' <<<"$out" | cut -d: -f1) -lt \
   $(grep -n '^namespace snippet_1' <<<"$out" | cut -d: -f1) ]] ||
  fail "the set-up's #include is not above the snippets" "$out"
grep -qF 'not C++' <<<"$out" && fail "an unmarked block was taken" "$out"

[[ $($tool block settings "$fixture") == $'build --copt=-O3\n# a comment, kept' ]] ||
  fail "block settings is not verbatim: $($tool block settings "$fixture")"

dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/snippets.XXXXXX")
msg=$($tool block nothing "$fixture" 2>&1) && fail "an unknown block name was accepted"
grep -qF "no block marked <!-- snippet: nothing -->" <<<"$msg" || fail "unknown name: $msg"
printf 'text\n<!-- snippet -->\nno fence\n' > "$dir/no_fence.md"
msg=$($tool cpp "$dir/no_fence.md" 2>&1) && fail "a marker without a fence was accepted"
grep -qF "no_fence.md:3: a snippet marker must be followed by a fenced code block" <<<"$msg" ||
  fail "marker without a fence: $msg"
printf '# nothing marked\n```cpp\nint x;\n```\n' > "$dir/none.md"
msg=$($tool cpp "$dir/none.md" 2>&1) && fail "a document without snippets was accepted"
grep -qF "no <!-- snippet --> C++ block" <<<"$msg" || fail "no snippets: $msg"
echo PASSED
