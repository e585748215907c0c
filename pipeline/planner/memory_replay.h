// Each device's peak bytes during one training step of a schedule, from what each action of
// each stage does to its device (StageMemory, stage_probe.h).
//
// Note [Replaying a device's memory]
// A device's allocated() moves for two reasons: its own worker's actions, in list order, and
// messages other workers copy onto it (Note [Where the copy happens], transport.h). The
// first is a function of the schedule alone. The second depends on when the senders run, so
// three answers are given:
//
//   predicted  messages arrive in the order of the replayed timeline (a message sent at the
//              end of its sender's action is there for every own action that starts later)
//   low        only the messages that must have arrived: their sender happens before the
//              action in the schedule's dependency order (schedule.h)
//   high       every message that may have arrived: all but those whose sender happens after
//
// and the measured peak of a step is in [low, high] whatever the threads do. At each own
// action the level before it is
//     static + Σ deltas of the actions before + messages counted at this point
// and its peak that level plus the action's peak. static is the stages' parameters, buffers,
// their optimizer state and (on the last device) the step's targets; .grad is created by each
// stage's first backward (the step starts after zero_grad()) and deferred BatchNorm's sums by
// its first forward, which is why StageMemory has first and later variants. Two stages of
// one device pass messages without a copy (the V's turn, a single worker): the receiver's
// input then stays with the sender's output until the sender's backward, and a gradient
// stays as the message, which the replay adds to the receiver's backward instead (under a
// 16-bit policy they are copies, replayed as messages, but for the portals in them, which
// are handed over as they are: MemoryModel::copied_handoffs).
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/planner/stage_memory.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/replay.h"

namespace pipewright::pipeline {

struct MemoryModel {
  /// Per stage: the memory of its cells with `rows` rows, and of the last micro-batch
  /// (tail[s], the same when every micro-batch has the same rows).
  std::vector<StageMemory> full;
  std::vector<StageMemory> tail;
  /// Optimizer state bytes per parameter byte (Adam, AdamW: 2; SGD with momentum: 1).
  double optimizer_state_factor = 2.0;
  /// .grad exists before the step (no zero_grad(set_to_none) between steps).
  bool grads_before_step = false;
  /// Under a 16-bit precision policy two stages of one worker hand over copies too: the
  /// sender narrows its output (or input gradient) into a new 16-bit tensor and the receiver
  /// widens it into another (Note [16-bit messages], stage_fn.cc), so such a hand-off is
  /// replayed as a message that arrives (PlanOptions::precision != kFloat32). Portals
  /// (StageMemory::input_portal_bytes, grad_output_portal_bytes) are never copied.
  bool copied_handoffs = false;

  const StageMemory& of(int stage, int microbatch, int num_microbatches) const {
    return microbatch == num_microbatches - 1 ? tail[static_cast<size_t>(stage)]
                                              : full[static_cast<size_t>(stage)];
  }
  /// What a worker's device holds before the step: its stages' parameters, buffers and
  /// optimizer state (and .grad when grads_before_step).
  int64_t static_bytes(const Schedule& schedule, int worker) const;
};

struct DevicePeak {
  int64_t predicted = 0, low = 0, high = 0;  // Note [Replaying a device's memory]
  int at = -1;       // index in the worker's list of the action where `predicted` is reached
  int at_high = -1;  // ... where `high` is (with bounds)
};

/// Peaks per worker's device (one device per worker) of `schedule` (validated, R actions
/// included) timed by `sim`. Computes low and high only when `bounds` is set (they cost
/// O(actions x micro-batches)). Throws std::invalid_argument when the model has another
/// number of stages than the schedule.
std::vector<DevicePeak> replay_memory(const Schedule& schedule, const ScheduleReplay& sim,
                                      const MemoryModel& model, bool bounds = false);

}  // namespace pipewright::pipeline
