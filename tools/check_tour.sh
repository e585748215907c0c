#!/usr/bin/env bash
# Checks the code references of docs/tour.md (or the given file): every
#   [path/file.cc:LINE](../path/file.cc#LLINE) `symbol`
# must name a file that exists and a LINE that contains `symbol` verbatim (both line numbers
# equal), and every other relative link must name a file that exists.
#
#   tools/check_tour.sh                 # check; prints each broken reference, exits 1 if any
#   tools/check_tour.sh --fix           # also moves each broken LINE to the line containing
#                                       # `symbol` nearest the old one, rewriting the file
#   tools/check_tour.sh [--fix] FILE    # another document (links relative to FILE's folder)
#
# Run by //tests/docs:tour_test (a reference into a file that test does not list as data
# reads as a missing file: add the file there).
set -uo pipefail
fix=0
if [[ ${1:-} == --fix ]]; then fix=1; shift; fi
doc=${1:-$(dirname "$0")/../docs/tour.md}
[[ -f $doc ]] || { echo "check_tour: no such document: $doc"; exit 1; }
base=$(dirname "$doc")

# Text as a sed pattern, and as a sed replacement (symbols hold *, &, [ and the like).
pattern() { sed 's/[][\.*^$|]/\\&/g' <<<"$1"; }
replacement() { sed 's/[&|\]/\\&/g' <<<"$1"; }

broken=0
refs=0
ref_re='\[([^]:]+):([0-9]+)\]\(([^)#]+)#L([0-9]+)\) `([^`]+)`'
while IFS= read -r ref; do
  [[ $ref =~ $ref_re ]] || continue
  shown=${BASH_REMATCH[1]} line=${BASH_REMATCH[2]} target=${BASH_REMATCH[3]}
  anchor=${BASH_REMATCH[4]} symbol=${BASH_REMATCH[5]}
  refs=$((refs + 1))
  file=$base/$target
  if [[ ! -f $file ]]; then
    echo "missing file: $target ($shown, \`$symbol\`)"
    broken=$((broken + 1))
    continue
  fi
  if [[ $line != "$anchor" ]]; then
    echo "$shown:$line: the link says #L$anchor"
    broken=$((broken + 1))
  fi
  if grep -qF -- "$symbol" <<<"$(sed -n "${line}p" "$file")"; then continue; fi
  # The nearest line that does contain the symbol, for the message and --fix.
  best=$(grep -nF -- "$symbol" "$file" | cut -d: -f1 |
         awk -v old="$line" '{d = $1 - old; if (d < 0) d = -d;
                              if (best == "" || d < bd) {best = $1; bd = d}} END {print best}')
  if [[ -z $best ]]; then
    echo "$shown: \`$symbol\` is nowhere in $target"
    broken=$((broken + 1))
  elif ((fix)); then
    from=$(pattern "[$shown:$line]($target#L$anchor) \`$symbol\`")
    to=$(replacement "[$shown:$best]($target#L$best) \`$symbol\`")
    sed -i "s|$from|$to|" "$doc"
    echo "fixed: $shown:$line -> $best (\`$symbol\`)"
  else
    echo "$shown:$line does not contain \`$symbol\` (line $best does; --fix moves it)"
    broken=$((broken + 1))
  fi
done < <(grep -oE '\[[^]:]+:[0-9]+\]\([^)]+\) `[^`]+`' "$doc")

# Every other relative link names a file or folder that exists.
while IFS= read -r target; do
  [[ $target =~ \#L[0-9]+$ ]] && continue  # a code reference, checked above
  path=${target%%#*}
  [[ -z $path || $path == http* || $path == mailto:* ]] && continue
  if [[ ! -e $base/$path ]]; then
    echo "missing link target: $path"
    broken=$((broken + 1))
  fi
done < <(grep -oE '\]\([^) ]+\)' "$doc" | sed -E 's/^\]\((.*)\)$/\1/')

if ((refs == 0)); then
  echo "check_tour: no code references found in $doc"
  exit 1
fi
echo "check_tour: $refs code references, $broken broken"
((broken == 0))
