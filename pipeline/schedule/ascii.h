// to_ascii: a schedule's replayed timeline as text, one row per worker, one column per time
// unit. For learners and for tests that compare a whole timeline at a glance.
#pragma once

#include <string>

#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/replay.h"

namespace pipewright::pipeline {

/// Replays `schedule` with `costs` (see replay.h; defaults tF = 1, tB = 2, tI = tW = 1,
/// tR = 1) and draws it. A cell is an action's letter and micro-batch ("F3", "B3", "I3",
/// "W3", "R3"), repeated over each time unit the action lasts; "." is an idle unit. When a
/// worker owns several stages (interleaving), a letter after the micro-batch names the
/// worker's virtual stage: "F3a" runs on its first stage, "F3b" on its second. gpipe(3, 4):
///
///     worker 0  F0 F1 F2 F3 .  .  .  .  .  .  .  B3 B3 B2 B2 B1 B1 B0 B0
///     worker 1  .  F0 F1 F2 F3 .  .  .  .  B3 B3 B2 B2 B1 B1 B0 B0 .  .
///     worker 2  .  .  F0 F1 F2 F3 B3 B3 B2 B2 B1 B1 B0 B0 .  .  .  .  .
///
/// Every line ends with '\n'; trailing spaces are trimmed. Throws what replay_schedule()
/// throws, and std::invalid_argument if a cost or the latency is not a whole number of time
/// units.
std::string to_ascii(const Schedule& schedule, const Costs& costs = Costs{});

/// The timeline of `schedule` with real-valued `costs` (measured microseconds, say) drawn
/// about `columns` units wide: the unit is the replayed makespan / columns, each positive
/// cost (and the latency) rounded to whole units, at least one so that no action vanishes.
/// Rounding may move a start by a unit or stretch the whole when many actions are short; the
/// order of each worker's actions and the dependencies are the schedule's. `unit` (when not
/// null) receives the unit in the costs' own units. Throws std::invalid_argument when
/// columns < 1, and what replay_schedule() throws.
std::string to_ascii_scaled(const Schedule& schedule, const Costs& costs, int columns,
                            double* unit = nullptr);

/// Draws a replay as computed, `unit` (in the replay's own units) per column: an action covers
/// the columns from its start's to its end's, each divided by `unit` and rounded, at least
/// one unless it takes no time; a later action of a worker overwrites a column an earlier one
/// rounded into. For replays other than replay_schedule's, such as
/// replay_on_shared_processors' (replay.h), whose actions last longer than their costs.
/// to_ascii(schedule, costs) is draw_replay(schedule, replay_schedule(schedule, costs), 1).
/// Throws std::invalid_argument when unit <= 0 or the replay's worker count is not the
/// schedule's (naming both).
std::string draw_replay(const Schedule& schedule, const ScheduleReplay& replay, double unit);

}  // namespace pipewright::pipeline
