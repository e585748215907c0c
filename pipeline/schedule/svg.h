// to_svg: a schedule's replayed timeline as an SVG picture (docs/img/*.svg are made with it,
// through the //pipeline:schedule_svg tool).
#pragma once

#include <string>
#include <string_view>

#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/replay.h"

namespace pipewright::pipeline {

/// Simulates `schedule` with `costs` and draws one row per worker, time to the right: a
/// colored box per action (F blue, B green, I teal, W yellow, R orange; a worker's second,
/// fourth... virtual stage in a lighter shade) labelled with its micro-batch and titled (a
/// browser's tooltip) with its action, stage, start and end, over a time axis,
/// with a title line (name, p, m, v, makespan, bubble fraction) and a legend. Throws what
/// replay_schedule() throws.
std::string to_svg(const Schedule& schedule, const Costs& costs = Costs{});

/// The same picture of a timeline already computed: `replay` is replay_schedule()'s answer for
/// `schedule`, or a measured step's (Trace::timeline(), pipeline/trace.h), whose times are in
/// `time_unit` (shown after the makespan in the title: "ms"; empty for replay units). Its
/// timeline must have one row per worker of `schedule`; throws std::invalid_argument when not.
std::string to_svg(const Schedule& schedule, const ScheduleReplay& replay, std::string_view time_unit = "");

}  // namespace pipewright::pipeline
