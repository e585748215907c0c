#!/bin/bash
# Before/after comparison of bench/pipe_bench in ONE run: two binaries (and the new one with
# PIPEWRIGHT_CPU_CACHING=0) interleaved process by process, so that load changes hit all three
# alike. Prints, per benchmark, the median step time, bubble, busy times, page faults per step
# and reserved MiB of each configuration.
#
#   git worktree add /tmp/pw-old <old commit> && (cd /tmp/pw-old && tools/bazel build //bench:pipe_bench)
#   tools/bazel build //bench:pipe_bench
#   flock /tmp/pw-bench.lock bench/pipe_bench_compare.sh /tmp/pw-old/bazel-bin/bench/pipe_bench \
#       bazel-bin/bench/pipe_bench [rounds=3]
set -euo pipefail
old=$(realpath "$1"); new=$(realpath "$2"); rounds=${3:-3}
out=$(mktemp -d /tmp/pipe_bench_compare.XXXXXX)
filter='^(pipe/(forward|train_step)/[a-z0-9-]+/[a-z_]+/min|plain/|balanced/)'
for round in $(seq "$rounds"); do
  for cfg in old new_nocache new; do
    bin=$new; caching=1
    [[ $cfg == old ]] && bin=$old
    [[ $cfg == new_nocache ]] && caching=0
    echo "$(date -u +%T) round $round $cfg: $(uptime)" >&2
    PIPEWRIGHT_CPU_CACHING=$caching "$bin" --benchmark_filter="$filter" --benchmark_repetitions=2 \
      --benchmark_enable_random_interleaving=true --benchmark_format=json \
      --benchmark_out="$out/$cfg.$round.json" > /dev/null
  done
done
echo "$(date -u +%T) end: $(uptime)" >&2
python3 - "$out" <<'PY'
import collections, glob, json, re, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for path in glob.glob(sys.argv[1] + "/*.json"):
    cfg = path.split("/")[-1].split(".")[0]
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = re.sub(r"/min_time:.*", "", b["name"])
        for key in ("real_time", "bubble", "bubble_sim", "stage0_ms", "stage1_ms",
                    "faults_per_step", "reserved_mb"):
            if key in b:
                rows[name][(cfg, key)].append(b[key])
for name in sorted(rows):
    cells = []
    for cfg in ("old", "new_nocache", "new"):
        def med(key):
            v = rows[name].get((cfg, key))
            return statistics.median(v) if v else float("nan")
        cells.append(f"{cfg} {med('real_time'):.1f} ms bubble {med('bubble'):.3f} "
                     f"sim {med('bubble_sim'):.3f} busy {med('stage0_ms'):.1f}/{med('stage1_ms'):.1f} "
                     f"faults {med('faults_per_step'):.0f} reserved {med('reserved_mb'):.0f} MiB")
    print(name + "\n    " + "\n    ".join(cells))
PY
