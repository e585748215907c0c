#!/usr/bin/env bash
# Keeps a card run's outputs in the repository: summary.txt as it is, and check.sh's other
# text files (tests, sanitizer, API counts, GPU, main job, planner, peer, benchmark), xz-
# compressed, in docs/gpu-runs/NAME/ (docs/cuda.md, "Keeping a run").
#
#   tools/gpu/keep_run.sh OUTDIR [--name NAME] [--dest DIR]
#
# OUTDIR: what tools/gpu/check.sh wrote (on this machine: the device tool's files_at).
# NAME: the folder, by default the day the run ended (UTC, from summary.txt's time), with
# -HHMM added when that day already has one. DIR: docs/gpu-runs by default.
# Also packs logs.tar.gz's whole outputs when the folder stays within 300 KiB with them;
# fails when it would not even without them. Prints the folder and a line to add to
# docs/BENCHMARKS.md's entry for the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)

usage() { echo "usage: tools/gpu/keep_run.sh OUTDIR [--name NAME] [--dest DIR]" >&2; exit 2; }
src=${1:-}
[[ -n "$src" ]] || usage
shift
name="" dest=$root/docs/gpu-runs limit_kib=300
while (($#)); do
  case $1 in
    --name) name=${2:?--name needs a name}; shift ;;
    --dest) dest=${2:?--dest needs a folder}; shift ;;
    *) usage ;;
  esac
  shift
done
[[ -f "$src/summary.txt" ]] || { echo "keep_run.sh: no $src/summary.txt (not a check.sh output folder)" >&2; exit 1; }

if [[ -z "$name" ]]; then
  # check.sh's first line says when it started ("started 2026-11-28T19:30Z"); else the file's time.
  ended=$(sed -n 's/.*| started \([0-9-]*\)T\([0-9]*\):\([0-9]*\)Z.*/\1T\2\3/p' "$src/summary.txt" | head -n 1)
  [[ -n "$ended" ]] || ended=$(date -u -r "$src/summary.txt" +%Y-%m-%dT%H%M)
  name=${ended%T*}
  [[ -e "$dest/$name" ]] && name="$name-${ended#*T}"
fi
folder=$dest/$name
[[ -e "$folder" ]] && { echo "keep_run.sh: $folder exists already (--name another)" >&2; exit 1; }

texts=()
for f in tests sanitizer apicount gpu mainjob plan peer bench; do
  [[ -f "$src/$f.txt" ]] && texts+=("$f.txt")
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$src/summary.txt" "$stage/"
((${#texts[@]} > 0)) && tar -C "$src" -cJf "$stage/outputs.tar.xz" "${texts[@]}"
kib() { echo $(($(du -sb "$1" | cut -f1) / 1024)); }
logs="left out"
if [[ -f "$src/logs.tar.gz" ]]; then
  # Recompressed as xz (the logs are text): several times smaller than check.sh's gzip.
  mkdir "$stage/logs"
  if tar -C "$stage/logs" -xzf "$src/logs.tar.gz" 2>/dev/null &&
      tar -C "$stage/logs" -cJf "$stage/logs.tar.xz" . && rm -rf "$stage/logs" &&
      (($(kib "$stage") <= limit_kib)); then
    logs="kept"
  else
    rm -rf "$stage/logs" "$stage/logs.tar.xz"
    logs="left out (over ${limit_kib} KiB with them)"
  fi
fi
size=$(kib "$stage")
if ((size > limit_kib)); then
  echo "keep_run.sh: ${size} KiB without the logs, over the ${limit_kib} KiB a kept run may take" >&2
  exit 1
fi
mkdir -p "$folder"
cp "$stage"/* "$folder/"
echo "keep_run.sh: $folder (${size} KiB: summary.txt, outputs.tar.xz with ${texts[*]:-nothing}; whole logs $logs)"
shown=$(realpath -m --relative-to="$root" "$folder")
echo "for docs/BENCHMARKS.md: Outputs kept in [$shown/]($(realpath -m --relative-to="$root/docs" "$folder")/summary.txt) (the other files: \`tar -xJf outputs.tar.xz\`)."
