// make_schedule: a schedule by name, for command lines and configuration files.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipeline/schedule.h"

namespace pipewright::pipeline {

/// The names make_schedule accepts: "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2".
const std::vector<std::string>& schedule_names();

/// The stage placement of the schedule `name` for p workers and v chunks per worker:
/// v_placement(p) for the V-shaped schedules ("zb-v", "dualpipev"), round_robin_placement(p, v)
/// for the others. Read off make_schedule(name, p, p, v), so the two never disagree. Throws
/// what make_schedule throws for the name, p and v.
std::vector<int> schedule_placement(std::string_view name, int p, int v = 1);

/// gpipe(p, m), one_f_one_b(p, m), interleaved_1f1b(p, m, v), zb_h1(p, m) or zb_h2(p, m).
/// `v` (model chunks per worker) is for "interleaved-1f1b"; the others require v == 1.
/// Throws std::invalid_argument for an unknown name (listing the valid ones), for v != 1 with
/// a schedule that has no chunks, and for whatever the generator rejects.
Schedule make_schedule(std::string_view name, int p, int m, int v = 1);

}  // namespace pipewright::pipeline
