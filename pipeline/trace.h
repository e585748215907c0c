// Trace: what every worker did during a pipeline step, and when.
//
// Each action a worker runs (F, R, B, I, W of one cell) becomes one TraceEvent with its start
// and end on std::chrono::steady_clock, in microseconds since the run began (on a GPU, when
// the host issued it; with StepOptions::device_timeline, when the device ran it, on the same
// time line: Note [Device timelines], runtime_timeline.cc). From the events:
//
//   worker 0 |F0|F1|F2|F3|        |B3|B2|B1|B0|          wall = last end - first start
//   worker 1    |F0|F1|F2|F3|B3|B2|B1|B0|                 busy(w) = Σ durations on w
//              ^-- bubble --^                             idle(w) = wall - busy(w)
//
//   bubble_fraction = Σ_w idle(w) / (workers × wall)
//
// which, for GPipe and 1F1B with equal stage times and free communication, is the textbook
// (p-1)/(m+p-1). Measured values also contain stage imbalance and the runtime's own
// overhead (channel hand-offs, copies), which is the point of measuring.
//
// A replayed step is a Trace too (Trace::replayed: the replay's timeline in microseconds),
// so measured and replayed timelines share one writer and one layout. to_chrome_json()
// writes the Trace Event Format that chrome://tracing and https://ui.perfetto.dev open:
//
//   process "worker w" (pid = w)
//     thread "stage s"  (tid = s)      one per stage the worker ran: "ph": "X" complete events
//                                      named F3, B0, ... (cat forward, recompute, backward,
//                                      backward_input, backward_weight; args stage, microbatch)
//     thread "sends"    (tid = 1000)   the worker's messages (measured traces only)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/replay.h"

namespace pipewright::pipeline {

struct TraceEvent {
  int worker = 0;
  int stage = 0;
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;
  double start_us = 0;  // since the run's epoch
  double end_us = 0;

  double duration_us() const { return end_us - start_us; }
};

/// One message a worker sent (an activation, a gradient, or a skip connection's portal):
/// the time of its send() on the sender's thread, which includes the copy to the receiver's
/// device on CPU (on a GPU, only issuing it). Not part of busy time: sends happen inside an
/// action's interval.
struct TraceTransfer {
  int worker = 0;       // the sender
  int from_stage = 0;
  int to_stage = 0;
  int microbatch = 0;
  bool gradient = false;
  std::string skip;     // the skip's key ("'a'") for a portal message, empty otherwise
  int64_t bytes = 0;
  double start_us = 0;
  double end_us = 0;
  /// "act 0->1 mb 3", "grad 2->1 mb 0", "portal 'a' 0->2 mb 1", "portal grad 'a' 2->0 mb 1".
  std::string name() const;
};

class Trace {
 public:
  Trace() = default;
  explicit Trace(int num_workers) : num_workers_(num_workers) {}

  /// `schedule` replayed with `costs` (replay.h) as a Trace: one TraceEvent per action of
  /// worker w, from start to end of its replayed interval, one time unit lasting
  /// `microseconds_per_unit`; no transfers. Its JSON says "simulated": true and the schedule's
  /// name in "otherData". Throws what replay_schedule() throws, and std::invalid_argument when
  /// microseconds_per_unit <= 0 (naming it).
  static Trace replayed(const Schedule& schedule, const Costs& costs = Costs{},
                         double microseconds_per_unit = 1000.0);

  int num_workers() const { return num_workers_; }
  const std::vector<TraceEvent>& events() const { return events_; }
  void add(const TraceEvent& event) { events_.push_back(event); }
  const std::vector<TraceTransfer>& transfers() const { return transfers_; }
  void add(TraceTransfer transfer) { transfers_.push_back(std::move(transfer)); }

  /// Last end - first start over all events (0 when empty), in microseconds.
  double wall_us() const;
  /// Sum of `worker`'s event durations, in microseconds.
  double busy_us(int worker) const;
  /// Σ idle / (workers × wall), in [0, 1]; 0 when there are no events.
  double bubble_fraction() const;
  /// The bubble fraction of `schedule` (the one this trace measured, one step of it) replayed
  /// with each action's own measured duration and free hand-offs: what the schedule and the
  /// actions' real durations force. bubble_fraction() minus this is the runtime's own idle
  /// time (waking a blocked worker, copying a message). Note [Replaying a step] in trace.cc.
  /// Throws std::invalid_argument naming the action when one of the schedule's actions has
  /// no event in this trace (another schedule, or a step that failed), and when the schedule
  /// cannot be replayed to its end.
  double replayed_bubble(const Schedule& schedule) const;

  /// The Trace Event Format JSON document (an object with "traceEvents" laid out as above, and
  /// "otherData": bubble_fraction, wall_us, replayed, and the schedule of a replayed one).
  std::string to_chrome_json() const;
  /// Writes to_chrome_json() to `path`. Throws std::runtime_error naming the path when the
  /// file cannot be written.
  void write_chrome_json(const std::string& path) const;

  /// Reads what to_chrome_json() wrote (the examples' --trace files, or a replayed trace):
  /// one TraceEvent per complete ("ph": "X") event of a stage's thread, its worker the pid,
  /// its stage and micro-batch from "args", its kind from "cat"; metadata and the "sends"
  /// thread's messages are skipped.
  /// Throws std::invalid_argument for text that is not JSON, has no "traceEvents" array, or
  /// has an action event with a field missing or of the wrong type (naming the event's index).
  static Trace from_chrome_json(std::string_view text);

  /// The schedule this trace ran: each worker's events in start order (ties: earlier end
  /// first) as its action list, stages on the workers that ran them, m = 1 + the largest
  /// micro-batch, named `name`; then validate()d. Throws std::invalid_argument when a stage
  /// ran on two workers, when there are no events, or with validate()'s message (a trace of a
  /// step that failed, cut short).
  Schedule schedule(const std::string& name = "trace") const;

  /// The events as a replay timeline of `schedule()` (its ScheduleReplay, with times in
  /// milliseconds from the first event's start): so a measured step is drawn and summed like a
  /// replayed one. `memory` is peak_memory(schedule()). Throws what schedule() throws.
  ScheduleReplay timeline() const;

 private:
  int num_workers_ = 0;
  std::string replayed_schedule_;  // the schedule's name, for a replayed trace
  bool replayed_ = false;
  std::vector<TraceEvent> events_;
  std::vector<TraceTransfer> transfers_;
};

/// The theoretical bubble fraction of GPipe / 1F1B: (p-1)/(m+p-1).
double theoretical_bubble(int num_workers, int num_microbatches);

/// Microseconds since `epoch` on the steady clock.
double micros_since(std::chrono::steady_clock::time_point epoch);

}  // namespace pipewright::pipeline
