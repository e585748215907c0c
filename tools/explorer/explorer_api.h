// The schedule explorer's one entry point into the C++ schedule library: JSON in, JSON out, so
// the same code answers the browser page (compiled to WebAssembly, tools/explorer/wasm_main.cc)
// and native callers (tests/tools/explorer_api_test.cc). Every number it returns is
// computed by the functions the runtime and the planner use: the registry's generators,
// build_schedule (pipeline/schedule/spec.h) for recompute, validate, replay_schedule and
// peak_memory (replay.h), to_svg, to_csv / from_csv / to_torch_csv / from_torch_csv (io.h),
// and Trace's reader (pipeline/trace.h). Nothing here re-implements a rule.
#pragma once

#include <string>
#include <string_view>

namespace pipewright::explorer {

/// The registry's rows as a JSON array, in registered_schedules() order:
///   [{"name": "1f1b", "description": "...", "v_min": 1, "v_max": 1 (0: no upper bound),
///     "v_text": "1", "placement": "round robin", "splits_backward": false}, ...]
/// Never throws.
std::string schedules_json();

/// Builds (or reads) one schedule and replays it. `request` is a JSON object:
///   "schedule": a registered name, "p": workers, "m": micro-batches, "v": virtual stages per
///       worker (0 or absent: the least the row takes);
///   or "csv": a schedule as text, pipewright's CSV (it has the "worker,index," header) or
///       torch.distributed.pipelining's action CSV (any other text); then schedule/p/m/v and
///       recompute are not read;
///   "recompute": "never" (default), "always", "except_last", or an array with one array per
///       stage of 0/1 per micro-batch (spec.h's RecomputeCells);
///   "costs": {"F", "B", "I", "W", "R"} per action on one (virtual) stage, in any time unit
///       (defaults 1, 2, 1, 1, 1: replay.h's); "per_stage": one such object per (virtual)
///       stage, replacing "costs" there (a measured trace's mean costs); "comm": added to every
///       dependency between two workers (default 0).
/// Answers {"ok": true, ...} with "schedule" (name, p, stages, m, v, stage_worker, actions per
/// worker as strings "F3", "B0", ... with their stage), "replay" (makespan, bubble, busy and
/// idle per worker, timeline per worker: stage, kind, mb, start, end), "memory" (peak cells:
/// stage_activations, stage_checkpointed_inputs, worker_activations,
/// worker_checkpointed_inputs), "theoretical_bubble" ((p-1)/(m+p-1)), "svg", "ascii" (null
/// where to_ascii cannot draw the costs in whole columns), "csv"
/// and "torch_csv" (null when the schedule recomputes: torch's format has no R);
/// or {"ok": false, "error": the library's message} for anything it refuses (an unknown
/// schedule, a v or m the generator refuses, a CSV the validator rejects, a negative cost,
/// a request that is not such an object). Never throws.
std::string explore_json(std::string_view request);

/// Reads a Chrome trace written by the examples' --trace (Trace::from_chrome_json) and
/// answers {"ok": true, ...} with the schedule it ran ("schedule", as explore_json's, named
/// "measured"; "csv": it in pipewright's CSV), "measured" (its timeline in milliseconds,
/// makespan, bubble, busy, idle), "replayed_bubble" (Trace::replayed_bubble: the same
/// schedule replayed with each action's measured duration and free hand-offs), "mean_costs"
/// (per stage: mean measured F, B, I, W, R in milliseconds, 0 where the stage ran none; the
/// page replays with them), "memory" and "svg" (the measured timeline, drawn by to_svg);
/// or {"ok": false, "error": ...}. Never throws.
std::string trace_json(std::string_view trace_text);

}  // namespace pipewright::explorer
