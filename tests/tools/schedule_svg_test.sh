#!/usr/bin/env bash
# //tools:schedule_svg as a user drives it: generate a schedule, write it as CSV (ours and
# torch's), read each back with --from (same timeline as the generated one), and refuse a
# hand-edited CSV that lost an action, naming the file and the gap.
set -euo pipefail
svg=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

"$svg" 1f1b 3 6 --csv > "$tmp/ours.csv"
grep -q '^worker,index,stage,kind,microbatch$' <<<"$(head -2 "$tmp/ours.csv")" || fail "no CSV header"
[[ "$("$svg" --from "$tmp/ours.csv" --ascii)" == "$("$svg" 1f1b 3 6 --ascii)" ]] ||
  fail "our CSV read back gives another timeline"

"$svg" zb-v 2 4 --torch-csv > "$tmp/torch.csv"
[[ "$("$svg" --from "$tmp/torch.csv" --stats)" == *"stages=4"* ]] || fail "torch CSV: stages"
[[ "$("$svg" --from "$tmp/torch.csv" --csv | head -1)" == *"stage_worker=0,1,1,0"* ]] ||
  fail "torch CSV: the V placement was not recovered"

# Drop worker 0's third action: refused with the file, the worker and the gap.
awk 'NR != 5' "$tmp/ours.csv" > "$tmp/broken.csv"
if err=$("$svg" --from "$tmp/broken.csv" --ascii 2>&1); then fail "a broken CSV was accepted"; fi
[[ "$err" == *"$tmp/broken.csv: from_csv: worker 0 has no action with index 2"* ]] ||
  fail "unexpected message: $err"

if "$svg" --from "$tmp/ours.csv" 1f1b 2>/dev/null; then fail "--from with NAME accepted"; fi
echo "schedule_svg: CSV round trips and refusals as expected"
