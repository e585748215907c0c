#!/usr/bin/env bash
# docs/tour.md passes tools/check_tour.sh; tests/docs/broken_tour.md (a moved line, a link
# that disagrees with its text, a missing file, a symbol that is gone, a missing page) fails
# it, naming each; --fix moves the moved line.
set -uo pipefail
tools/check_tour.sh docs/tour.md || exit 1

out=$(tools/check_tour.sh tests/docs/broken_tour.md)
if [[ $? -eq 0 ]]; then
  echo "check_tour.sh accepted tests/docs/broken_tour.md:"
  echo "$out"
  exit 1
fi
for expected in "tests/docs/fixture.txt:2 does not contain \`alpha\` (line 1 does" \
                "tests/docs/fixture.txt:2: the link says #L3" \
                "missing file: none.cc" \
                "\`delta\` is nowhere in fixture.txt" \
                "missing link target: no_such_page.md" \
                "5 code references, 5 broken"; do
  if ! grep -qF -- "$expected" <<<"$out"; then
    echo "check_tour.sh did not say: $expected"
    echo "$out"
    exit 1
  fi
done

dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/tour.XXXXXX")
cp tests/docs/fixture.txt "$dir/"
printf '[f:2](fixture.txt#L2) `alpha`\n' > "$dir/doc.md"
tools/check_tour.sh --fix "$dir/doc.md" >/dev/null
if [[ $(cat "$dir/doc.md") != '[f:1](fixture.txt#L1) `alpha`' ]]; then
  echo "--fix wrote: $(cat "$dir/doc.md")"
  exit 1
fi
echo PASSED
