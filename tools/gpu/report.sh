# shellcheck shell=bash
# Functions check.sh uses to read compute-sanitizer logs and API counts, sourced by it, by
# tools/gpu/apicount/count.sh and by tests/tools/gpu_check_test.sh (which feeds them canned
# logs). Plain bash and awk: the GPU machine may have nothing else.

# Its arguments joined by ", ".
join_comma() {
  local IFS=$'\x1f' joined
  joined="$*"
  echo "${joined//$'\x1f'/, }"
}

# ---- which kernels racecheck and synccheck must see ----

# The kernel sources (.cu) in DIR that use shared memory, warp shuffles or launch.cuh's block
# reductions, directly or through a .cuh they include (launch.cuh itself, which every kernel
# includes, only defines the reductions).
shared_memory_sources() {  # DIR
  local dir=$1 pattern='__shared__|__shfl|block_sum|block_max|warp_sum|warp_max'
  local headers=() h f
  for h in "$dir"/*.cuh; do
    [[ -e "$h" && "$(basename "$h")" != launch.cuh ]] || continue
    grep -qE "$pattern" "$h" && headers+=("$(basename "$h")")
  done
  for f in "$dir"/*.cu; do
    [[ -e "$f" ]] || continue
    if grep -qE "$pattern" "$f"; then
      echo "$f"
      continue
    fi
    for h in "${headers[@]}"; do
      if grep -qE "#include +\"([^\"]*/)?$h\"" "$f"; then
        echo "$f"
        break
      fi
    done
  done
}

# The test binaries MAP (tools/gpu/racecheck.txt) names, once each, in its order.
mapped_binaries() {  # MAP
  awk '!/^#/ && NF >= 2 { for (i = 2; i <= NF; ++i) if (!seen[$i]++) print $i }' "$1"
}

# The sources shared_memory_sources finds in DIR that MAP has no line for (relative to ROOT).
unmapped_sources() {  # MAP DIR ROOT
  local map=$1 dir=$2 root=$3 f
  while read -r f; do
    f=${f#"$root"/}
    awk -v f="$f" '$1 == f { found = 1 } END { exit !found }' "$map" || echo "$f"
  done < <(shared_memory_sources "$dir")
}

# ---- compute-sanitizer logs ----

# One run's verdict from its log: four words, ERRORS TESTS EXIT NOTE.
#   ERRORS  the errors its summary line counts: "ERROR SUMMARY: N errors" (every tool) or
#           racecheck's "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)", the
#           larger where both are there; "?" when neither is (a timeout, a crash, a run the
#           tool refused)
#   TESTS   the Catch2 result under the tool: passed, failed:F (F test cases), or - (none)
#   EXIT    the exit status job() recorded (124: the timeout), or - (not started)
#   NOTE    ok, timeout, not-started, unsupported (the tool could not run here: "Device not
#           supported", an internal sanitizer error, no instrumented API call), or no-summary
sanitizer_verdict() {  # LOG
  local log=$1 errors tests exit note
  errors=$(sed -n -e 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' \
    -e 's/.*RACECHECK SUMMARY: .*(\([0-9][0-9]*\) error.*/\1/p' "$log" 2>/dev/null |
    awk 'NR == 1 || $1 > m { m = $1 } END { if (NR) print m; else print "?" }')
  if grep -q "^All tests passed" "$log" 2>/dev/null; then
    tests=passed
  else
    tests=$(sed -n 's/^test cases:.*| *\([0-9][0-9]*\) failed.*/failed:\1/p' "$log" 2>/dev/null | tail -n 1)
    tests=${tests:--}
  fi
  exit=$(sed -n 's/^(exit status \([0-9][0-9]*\),.*/\1/p' "$log" 2>/dev/null | tail -n 1)
  exit=${exit:--}
  if grep -q "^(not started" "$log" 2>/dev/null || [[ ! -e "$log" ]]; then
    note=not-started
  elif grep -qiE "Device not supported|Internal Sanitizer Error|before first instrumented API call|Unable to find injection|Sanitizer failed to" "$log"; then
    note=unsupported
  elif [[ "$exit" == 124 ]]; then
    note=timeout
  elif [[ "$errors" == "?" ]]; then
    note=no-summary
  else
    note=ok
  fi
  echo "$errors $tests $exit $note"
}

# sanitizer.txt: a table of every run (tool, binary, errors, tests, exit status, note), then
# the first lines of each run that found errors, failed, or had no summary. On stdout, the
# line for summary.txt: "TOOL E in S/R" is E errors in the S of its R runs that finished with
# a summary; FAILED when a run found errors or tests failed under a tool. Each RUN is
# TOOL.BINARY; its log is JOBS/sanitizer.TOOL.BINARY.
sanitizer_report() {  # JOBS OUT RUN...
  local jobs=$1 out=$2 run tool binary errors tests exit note
  shift 2
  local total=0 summarized=0 unsupported=0 incomplete=0 not_started=0 failing=() with_errors=()
  declare -A tool_errors=() tool_runs=() tool_done=()
  {
    printf '%-10s %-50s %6s %-10s %4s %s\n' tool binary errors tests exit note
    for run in "$@"; do
      tool=${run%%.*} binary=${run#*.}
      read -r errors tests exit note < <(sanitizer_verdict "$jobs/sanitizer.$run")
      printf '%-10s %-50s %6s %-10s %4s %s\n' "$tool" "$binary" "$errors" "$tests" "$exit" "$note"
    done
    for run in "$@"; do
      read -r errors tests exit note < <(sanitizer_verdict "$jobs/sanitizer.$run")
      [[ "$note" == not-started || ("$note" == ok && "$errors" == 0 && "$tests" != failed:*) ]] && continue
      echo
      echo "== ${run%%.*} ${run#*.}: $errors errors, tests $tests, exit $exit, $note"
      grep -E "^=========|^(All tests|test cases:|\(exit status|\(not started)|FAILED|SKIPPED" \
        "$jobs/sanitizer.$run" 2>/dev/null | head -n 40
    done
  } >"$out"
  for run in "$@"; do
    tool=${run%%.*} binary=${run#*.}
    read -r errors tests exit note < <(sanitizer_verdict "$jobs/sanitizer.$run")
    total=$((total + 1))
    tool_runs[$tool]=$((${tool_runs[$tool]:-0} + 1))
    if [[ "$note" == unsupported ]]; then
      unsupported=$((unsupported + 1))
    elif [[ "$note" == not-started ]]; then
      not_started=$((not_started + 1))
    elif [[ "$errors" == "?" ]]; then
      incomplete=$((incomplete + 1))
    else
      summarized=$((summarized + 1))
      tool_done[$tool]=$((${tool_done[$tool]:-0} + 1))
      tool_errors[$tool]=$((${tool_errors[$tool]:-0} + errors))
      ((errors > 0)) && with_errors+=("$tool $binary")
    fi
    [[ "$tests" == failed:* ]] && failing+=("$tool $binary")
  done
  local sum=0 t parts=()
  for t in memcheck racecheck synccheck initcheck; do
    [[ -n "${tool_runs[$t]:-}" ]] || continue
    parts+=("$t ${tool_errors[$t]:-0} in ${tool_done[$t]:-0}/${tool_runs[$t]}")
    sum=$((sum + ${tool_errors[$t]:-0}))
  done
  local line
  line="compute-sanitizer: $sum errors in $summarized of $total runs ($(join_comma "${parts[@]}"))"
  ((incomplete > 0)) && line+="; $incomplete ended without a summary (timeout or crash)"
  ((not_started > 0)) && line+="; $not_started not started (the phase's time ran out: --budget, or --steps/--tests for a second call)"
  ((unsupported > 0)) && line+="; the tool could not run on this machine in $unsupported (e.g. \"Device not supported\": a gVisor VM)"
  ((${#with_errors[@]} > 0)) && line+="; errors in: $(join_comma "${with_errors[@]}")"
  ((${#failing[@]} > 0)) && line+="; tests failing under the tool: $(join_comma "${failing[@]}")"
  ((sum > 0 || ${#failing[@]} > 0)) && line="FAILED: $line"
  echo "$line (sanitizer.txt)"
}

# ---- API counts (tools/gpu/apicount) ----

# Per-step counts from a long and a short run of the same command: (long - short) / STEPS for
# every (source, name) in either file, as lines "LABEL SOURCE PER_STEP NAME". A count file has
# lines "SOURCE COUNT NAME..." (libpw_apicount.so's format; # lines are comments).
apicount_per_step() {  # LABEL LONG SHORT STEPS
  awk -v label="$1" -v steps="$4" '
    /^#/ || NF < 3 { next }
    {
      key = $1; for (i = 3; i <= NF; ++i) key = key " " $i
      if (FILENAME == long) l[key] = $2; else s[key] = $2
      keys[key] = 1
    }
    END {
      for (k in keys) {
        d = (l[k] - s[k]) / steps
        src = k; sub(/ .*/, "", src); name = k; sub(/^[^ ]* /, "", name)
        v = sprintf("%.3f", d); sub(/0+$/, "", v); sub(/\.$/, "", v)
        printf "%s %s %s %s\n", label, src, v, name
      }
    }' long="$2" "$2" "$3" | sort -k1,1 -k4
}

# The value of SOURCE NAME for LABEL in a per-step file, or empty.
apicount_value() {  # FILE LABEL SOURCE NAME
  awk -v l="$2" -v s="$3" -v n="$4" '
    { name = $4; for (i = 5; i <= NF; ++i) name = name " " $i }
    $1 == l && $2 == s && name == n { print $3; exit }' "$1" 2>/dev/null
}

# A sum of several names' per-step values (0 where none is there; empty when the source has
# no line at all for LABEL).
apicount_sum() {  # FILE LABEL SOURCE NAME...
  local file=$1 label=$2 source=$3
  shift 3
  awk -v l="$label" -v s="$source" -v names="$(printf '%s\n' "$@")" '
    BEGIN { n = split(names, want, "\n"); for (i = 1; i <= n; ++i) w[want[i]] = 1 }
    $1 == l && $2 == s {
      any = 1; name = $4; for (i = 5; i <= NF; ++i) name = name " " $i
      if (name in w) sum += $3
    }
    END { if (any) print sum + 0 }' "$file" 2>/dev/null
}

# apicount.txt's table for LABEL: every name either source counted, the card's per-step count
# (CARD file, source "card") beside cudasim's (SIM file, source "cudasim"), and whether they
# differ. Then, on stdout, one line for summary.txt; WHY_NO_CARD says why, when CARD has no
# card counts for LABEL.
apicount_compare() {  # LABEL CARD SIM TABLE_OUT [WHY_NO_CARD]
  local label=$1 card=$2 sim=$3 table=$4 why_no_card=${5:-the counted runs failed}
  local names n c s differ=() key_card key_sim
  names=$( { awk -v l="$label" '$1 == l && $2 == "card"' "$card" 2>/dev/null
             awk -v l="$label" '$1 == l && $2 == "cudasim"' "$sim" 2>/dev/null; } |
    awk '{ name = $4; for (i = 5; i <= NF; ++i) name = name " " $i; print name }' | sort -u)
  local has_card has_sim
  has_card=$(awk -v l="$label" '$1 == l && $2 == "card" { print "y"; exit }' "$card" 2>/dev/null)
  has_sim=$(awk -v l="$label" '$1 == l && $2 == "cudasim" { print "y"; exit }' "$sim" 2>/dev/null)
  {
    echo "== $label: calls per warm step"
    printf '%-40s %10s %10s\n' name card cudasim
    while IFS= read -r n; do
      [[ -n "$n" ]] || continue
      c=$(apicount_value "$card" "$label" card "$n")
      s=$(apicount_value "$sim" "$label" cudasim "$n")
      local mark=""
      if [[ -n "$has_card" && -n "$has_sim" && -n "$c" && -n "$s" && "$c" != "$s" ]]; then
        mark=" differs"
        differ+=("$n")
      fi
      printf '%-40s %10s %10s%s\n' "$n" "${c:--}" "${s:--}" "$mark"
    done <<<"$names"
    echo
  } >>"$table"
  # Key figures: launches, GEMMs, host waits, device-to-host reads, event records, allocations.
  key() {  # FILE SOURCE
    local f=$1 src=$2 l g w r e a
    l=$(apicount_sum "$f" "$label" "$src" "kernel launch")
    [[ -n "$l" ]] || { echo "n/a"; return; }
    g=$(apicount_sum "$f" "$label" "$src" cublasSgemm cublasDgemm cublasGemmEx)
    w=$(apicount_sum "$f" "$label" "$src" cudaStreamSynchronize cudaDeviceSynchronize cudaEventSynchronize)
    r=$(apicount_sum "$f" "$label" "$src" "cudaMemcpyAsync DeviceToHost" "cudaMemcpy DeviceToHost")
    e=$(apicount_sum "$f" "$label" "$src" cudaEventRecord)
    a=$(apicount_sum "$f" "$label" "$src" cudaMalloc cudaFree cudaMallocHost)
    echo "$l launches, $g GEMMs, $w host waits, $r reads, $e event records, $a allocations"
  }
  key_card=$(key "$card" card)
  key_sim=$(key "$sim" cudasim)
  local line="API calls per warm step, $label: card $key_card | cudasim $key_sim"
  if [[ -z "$has_card" ]]; then
    line+=" (no card counts: $why_no_card)"
  elif [[ -z "$has_sim" ]]; then
    line+=" (no cudasim counts to compare with)"
  elif ((${#differ[@]} == 0)); then
    line+=" (every name both count: equal)"
  else
    line+=" (${#differ[@]} differ: $(join_comma "${differ[@]}"))"
  fi
  echo "$line (apicount.txt)"
}
