// make_schedule: a schedule by name, for command lines and configuration files.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// The names make_schedule accepts: "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2",
/// "interleaved-zb", "looped-bfs", "zb-v", "dualpipev".
const std::vector<std::string>& schedule_names();

/// The stage placement of the schedule `name` for p workers and v virtual stages per worker:
/// v_placement(p) for the V-shaped schedules ("zb-v", "dualpipev"), round_robin_placement(p, v)
/// for the others. Read off make_schedule(name, p, 2p, v), so the two never disagree. Throws
/// what make_schedule throws for the name, p and v.
std::vector<int> schedule_placement(std::string_view name, int p, int v = 1);

/// gpipe(p, m), one_f_one_b(p, m), interleaved_1f1b(p, m, v), zb_h1(p, m), zb_h2(p, m),
/// interleaved_zero_bubble(p, m, v), looped_bfs(p, m, v), zb_v(p, m) or dualpipev(p, m).
/// `v` (virtual stages per worker) is any v >= 1 for the interleaved schedules and looped-bfs,
/// exactly 2 for the V-shaped ones, 1 for the others. Throws std::invalid_argument for an
/// unknown name (listing the valid ones), for a v the schedule does not take, and for
/// whatever the generator rejects.
Schedule make_schedule(std::string_view name, int p, int m, int v = 1);

}  // namespace pipewright::pipeline
