// The schedule registry: one row per schedule, the only place that knows schedule names
// (torch.distributed.pipelining's get_schedule_class map, with the facts the runtime and the
// tools need beside each generator).
//
//   name               generator                  v (stages per worker)  placement    B split
//   gpipe              gpipe(p, m)                1                      round robin  no
//   1f1b               one_f_one_b(p, m)          1                      round robin  no
//   interleaved-1f1b   interleaved_1f1b(p, m, v)  any v >= 2             round robin  no
//   zb-h1              zb_h1(p, m)                1                      round robin  I + W
//   ...                (the table is in registry.cc; registered_schedules() lists it)
//
// make_schedule, Pipe (its default placement and train_step by name), the examples' --schedule
// and --virtual-stages flags and their help text, tools/schedule_svg, bench/schedule_bench and
// the planner all read these rows. Adding a schedule is one generator file plus one row
// (docs/schedules.md, "Write your own schedule"); register_schedule adds a row at run time.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Where a schedule puts its stages (schedule.h): round robin (stage s on worker s % p) or
/// the V (worker w holds stages w and 2p-1-w).
enum class StagePlacement { kRoundRobin, kV };

/// "round robin" or "V".
std::string to_string(StagePlacement placement);

/// round_robin_placement(p, v) or v_placement(p). Throws what those throw.
std::vector<int> place(StagePlacement placement, int p, int v);

/// The virtual stages per worker (v) a schedule takes: every v in [min, max], max = 0
/// meaning no upper bound. A schedule that is not given a v takes min.
struct VirtualStages {
  int min = 1;
  int max = 1;

  bool allows(int v) const { return v >= min && (max == 0 || v <= max); }
  /// The allowed v nearest to `v`.
  int clamp(int v) const;
  /// "1", "2", "any v >= 1", "2..4".
  std::string str() const;
};

/// One row of the registry.
struct ScheduleInfo {
  std::string name = {};                               // "1f1b": what --schedule takes
  std::function<Schedule(int p, int m, int v)> generate = {};  // p workers, m micro-batches
  VirtualStages virtual_stages = {};
  StagePlacement placement = StagePlacement::kRoundRobin;
  bool splits_backward = false;                        // I and W actions instead of B
  std::string description = {};                        // one line, for help text
};

/// Every registered schedule: the built-in ones in the order of the table above, then those
/// added by register_schedule in the order they were added. A copy, safe to keep.
std::vector<ScheduleInfo> registered_schedules();

/// The names of registered_schedules(), in the same order.
std::vector<std::string> schedule_names();

/// The row named `name`. Throws std::invalid_argument naming it and listing the valid names.
ScheduleInfo find_schedule(std::string_view name);

/// Adds a row. Throws std::invalid_argument (naming the value) when the name is empty or
/// already registered, the generator is empty, or virtual_stages is not 1 <= min and
/// (max == 0 or min <= max). Thread-safe; rows are never removed.
void register_schedule(ScheduleInfo info);

/// The stage placement of schedule `name` for p workers and v virtual stages per worker:
/// place(row.placement, p, v). Throws what make_schedule throws for the name and v, and what
/// place throws for p.
std::vector<int> schedule_placement(std::string_view name, int p, int v = 1);

/// The schedule `name` for p workers, m micro-batches and v virtual stages per worker (the
/// row's generator). Throws std::invalid_argument for an unknown name (listing the valid
/// ones), for a v the row does not allow (naming the schedules that take v > 1), and for
/// whatever the generator rejects (e.g. interleaved-1f1b's m % p != 0).
Schedule make_schedule(std::string_view name, int p, int m, int v = 1);

/// One line per row, "  name  description", for --help text.
std::string describe_schedules();

}  // namespace pipewright::pipeline
