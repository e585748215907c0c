// Step: the state one pipeline step shares between the caller and the workers.
//
// A step is one mini-batch: its micro-batches, a Cell per (stage, micro-batch), the transport
// its messages travel through, its trace, and the first exception any worker raised. The
// caller fills the read-only part, the runtime runs the schedule's actions on the workers
// (Runtime::execute, possibly in two phases: Pipe::forward then PipeBackward), and the caller
// reads the results after the workers are done.
//
// Ownership rule that keeps it lock-free: everything indexed by stage (cells, counters) is
// touched only by the worker owning that stage; everything indexed by micro-batch at the
// last stage (outputs, losses) only by the last stage's worker; input_grads only by stage 0's
// worker; events[w] and transfers[w] only by worker w. The caller touches them before submitting and after the
// completion countdown, whose mutex orders those accesses (no data race, TSan-clean).
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/precision.h"
#include "nn/arguments.h"
#include "nn/random_key.h"
#include "nn/sequential.h"
#include "pipeline/cell.h"
#include "pipeline/microbatch.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/step_loss.h"
#include "pipeline/step_result.h"
#include "pipeline/trace.h"
#include "pipeline/transport.h"
#include "tensor/deferred_check.h"
#include "tensor/stream.h"

namespace pipewright::pipeline {

/// A step's losses and deferred-check flags gathered on their devices, not yet read
/// (gather_step_values, pipeline/step_readback.h): per device one float64 tensor, and what each
/// of its elements is (a micro-batch's loss, or the flag of a check).
struct GatheredValues {
  struct Value {
    int loss = -1;                                                // its micro-batch, or
    const std::pair<DeferredCheck, ActionSite>* check = nullptr;  // the check it is the flag of
    bool overflow = false;  // or the whole step's loss-scaling finding (add_overflow_finding)
  };
  std::vector<Tensor> tensors;
  std::vector<std::vector<Value>> values;  // [device][element]
  /// With Step::defer_read: a float64 on the first device, 0 when every loss is finite and no
  /// check failed, else not 0 (a graph's updates read it: DeviceGraph::set_gate).
  Tensor gate;
};

class Step {
 public:
  /// `checkpointed_cells[s][j]`: whether cell (s, j) runs as a checkpointed cell (the
  /// schedule has an R for it). `cell_mode` is kRecord (training with grad) or kNoGrad.
  /// `transport`: where messages travel (null: an InProcessTransport).
  Step(int stages, int workers, MicroBatches batches, CellMode cell_mode,
       std::vector<std::vector<char>> checkpointed_cells,
       std::unique_ptr<Transport> transport = nullptr);
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // ---- fixed before the workers run ----
  const int num_stages;
  const int num_workers;
  const int num_microbatches;
  const CellMode mode;
  const std::vector<std::vector<char>> checkpointed;     // [stage][micro-batch]
  MicroBatches inputs;                                   // stage 0's micro-batches
  std::vector<char> input_needs_grad;                    // per input position (stage 0)
  std::unique_ptr<StepLoss> loss;                        // train/eval_step: the loss on the
                                                         // last stage; null: Pipe::forward
  nn::Arguments arguments;                               // non-tensor, seen by every stage
  nn::RandomKey random_key;                              // the step's key; first_sample is
                                                         // the mini-batch's (Note [Keyed
                                                         // randomness], nn/random_key.h)
  std::vector<nn::Tensors> output_grads;                 // Pipe backward: per micro-batch
  autograd::Precision precision = autograd::Precision::kFloat32;  // PipeOptions::precision
  /// Runtime::execute gathers the values into `gathered` and leaves the read to the caller (a
  /// step captured as a graph reads them after each replay, Note [A step as one graph]).
  bool defer_read = false;
  GatheredValues gathered;
  const std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();

  // ---- written by the owning worker, read by the caller afterwards ----
  std::vector<std::vector<Cell>> cells;                  // [stage][micro-batch]
  std::vector<autograd::WorkingCopies> working_copies;   // per stage: its parameters' 16-bit
                                                         // copies under `precision`, made
                                                         // once per step
  std::vector<nn::Tensors> outputs;                      // last stage, per micro-batch
                                                         // (with a loss: detached copies)
  std::vector<double> losses;                            // with a loss: per micro-batch, read
                                                         // at the end (Note [One read per
                                                         // step]); processes share them
  bool found_inf = false;                                // read with them: the whole step's
                                                         // loss-scaling finding, when gathered
  /// Each worker's deferred checks (Note [Deferred checks], tensor/deferred_check.h) and the
  /// action that made them, so a failure found at the end names that action.
  std::vector<std::vector<std::pair<DeferredCheck, ActionSite>>> deferred_checks;  // per worker
  std::vector<nn::Tensors> input_grads;                  // stage 0, per micro-batch
  StepCounters counters;
  std::vector<std::vector<TraceEvent>> events;           // per worker
  /// StepOptions::device_timeline: per worker on a CUDA device, the timing events around its
  /// actions and its device's reference event, recorded on an idle stream at host time
  /// reference_us (Note [Device timelines], runtime_timeline.cc).
  struct DeviceClock {
    std::shared_ptr<const Event> reference;  // shared by the workers of one device
    double reference_us = 0;
    std::vector<Event> starts, ends;  // one pair per traced action, in `events`' order
    size_t converted = 0;             // events already on the device's clock
  };
  bool device_timeline = false;
  std::vector<DeviceClock> device_clocks;                // per worker (with device_timeline)
  std::vector<std::vector<TraceTransfer>> transfers;     // per (sending) worker

  Transport& transport() { return *transport_; }
  Cell& cell(const Action& a) {
    return cells.at(static_cast<size_t>(a.stage)).at(static_cast<size_t>(a.microbatch));
  }
  bool is_last(int stage) const { return stage == num_stages - 1; }

  /// Records `error` if it is the first, and cancels the transport so no worker keeps
  /// waiting. Safe from any thread.
  void fail(std::exception_ptr error);
  /// fail(), also remembering that `action` (index `index` of `worker`'s list) raised it.
  void fail_at(std::exception_ptr error, int worker, int index, const Action& action);
  bool failed() const { return failed_.load(std::memory_order_seq_cst); }
  /// The first error, or nullptr.
  std::exception_ptr error() const;
  /// Called by a worker before each action; counts the actions started after the failure.
  void count_action_start() { actions_started_.fetch_add(1, std::memory_order_seq_cst); }
  /// Where the first error began (nullopt without an error, or when it was raised outside an
  /// action), with actions_after filled in. Call after the workers are done.
  std::optional<Failure> failure() const;
  /// The action of failure(), if any (the processes name it in their messages).
  std::optional<Action> failed_action() const;

  /// The events of every worker so far, as one Trace.
  Trace trace() const;
  /// The random key of micro-batch j's cells: random_key with first_sample advanced by the
  /// rows of micro-batches 0..j-1.
  nn::RandomKey microbatch_key(int j) const;

 private:
  std::unique_ptr<Transport> transport_;
  mutable std::mutex error_mutex_;
  std::exception_ptr error_;
  std::optional<Failure> failure_;
  int64_t started_at_failure_ = 0;
  std::atomic<int64_t> actions_started_{0};
  std::atomic<bool> failed_{false};
};

}  // namespace pipewright::pipeline
