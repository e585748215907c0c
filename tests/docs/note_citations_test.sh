#!/usr/bin/env bash
# Every citation of a Note that names a file names the file that defines the Note, and every
# Note cited is defined (tests/docs/check_note_citations.py, on the files this test's data
# lists); the fixture tests/docs/note_fixture/ (a wrong file, an ambiguous bare name, a wrong
# link target, a Note defined nowhere, a title that wraps, a Note defined twice) fails it,
# naming each.
set -uo pipefail
check=tests/docs/check_note_citations.py
python3 "$check" || exit 1

out=$(python3 "$check" --root tests/docs/note_fixture)
if [[ $? -eq 0 ]]; then
  echo "check_note_citations.py accepted tests/docs/note_fixture:"
  echo "$out"
  exit 1
fi
expected=(
  "Note [Twice] is defined in 2 files: lib/alpha.h:9, lib/gamma.cc:5"
  "README.md:4: Note [Alpha] names alpha.h, which is lib/alpha.h or other/alpha.h; it is defined in lib/alpha.h"
  "README.md:4: Note [Delta] is defined nowhere"
  "README.md:5: Note [Gamma] names lib/alpha.h; it is defined in lib/gamma.cc"
  "docs/page.md:1: Note [Beta] names other/alpha.h; it is defined in lib/alpha.h"
  "docs/page.md:1: Note [Alpha] names gamma.cc; it is defined in lib/alpha.h"
  "lib/gamma.cc:8: Note [A title that wraps] is defined nowhere"
  "lib/gamma.cc:11: Note [Alpha] names lib/gamma.cc; it is defined in lib/alpha.h"
  "18 citations of 4 Notes, 8 broken"
)
for line in "${expected[@]}"; do
  if ! grep -qF -- "$line" <<<"$out"; then
    echo "check_note_citations.py did not say: $line"
    echo "$out"
    exit 1
  fi
done
echo PASSED
