#include "pipeline/step.h"

#include <stdexcept>
#include <string>

namespace pipewright::pipeline {

Step::Step(int stages, int workers, MicroBatches batches, CellMode cell_mode,
           std::vector<std::vector<char>> checkpointed_cells, std::unique_ptr<Transport> transport)
    : num_stages(stages),
      num_workers(workers),
      num_microbatches(batches.count()),
      mode(cell_mode),
      checkpointed(std::move(checkpointed_cells)),
      inputs(std::move(batches)),
      output_grads(num_microbatches),
      cells(num_stages),
      working_copies(static_cast<size_t>(num_stages)),
      outputs(num_microbatches),
      losses(num_microbatches, 0.0),
      deferred_checks(num_workers),
      input_grads(num_microbatches),
      counters(num_stages),
      events(num_workers),
      transfers(num_workers),
      transport_(transport ? std::move(transport) : std::make_unique<InProcessTransport>()) {
  for (auto& row : cells) row.resize(num_microbatches);
}

nn::RandomKey Step::microbatch_key(int j) const {
  nn::RandomKey key = random_key;
  for (int i = 0; i < j; ++i) key.first_sample += inputs.sizes.at(static_cast<size_t>(i));
  return key;
}

void Step::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::move(error);
  }
  failed_.store(true, std::memory_order_seq_cst);
  transport_->cancel();
}

void Step::fail_at(std::exception_ptr error, int worker, int index, const Action& action) {
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) {
      Failure f;
      f.worker = worker;
      f.action_index = index;
      f.action = action;
      f.error = error;
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        f.what = e.what();
      } catch (...) {
        f.what = "unknown exception";
      }
      failure_ = std::move(f);
      // The flag goes up before the count is read (both seq_cst, as are failed() and
      // count_action_start()): a worker that still saw no failure starts at most one more
      // action, and its next failed() sees the flag. Reading the count first let a worker
      // run several actions between the read and fail()'s store (actions_after > workers - 1
      // under TSan's timing).
      failed_.store(true, std::memory_order_seq_cst);
      started_at_failure_ = actions_started_.load(std::memory_order_seq_cst);
    }
  }
  fail(std::move(error));
}

std::optional<Failure> Step::failure() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  if (!failure_) return std::nullopt;
  Failure f = *failure_;
  f.actions_after = actions_started_.load(std::memory_order_acquire) - started_at_failure_;
  return f;
}

std::string Failure::str() const {
  return "stage " + std::to_string(action.stage) + " (worker " + std::to_string(worker) +
         "), micro-batch " + std::to_string(action.microbatch) + ", action " +
         std::to_string(action_index) + " of the worker (" + action.str() + "): " + what;
}

std::exception_ptr Step::error() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  return error_;
}

std::optional<Action> Step::failed_action() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  if (!failure_) return std::nullopt;
  return failure_->action;
}

Trace Step::trace() const {
  Trace trace(num_workers);
  for (const auto& worker_events : events) {
    for (const TraceEvent& e : worker_events) trace.add(e);
  }
  for (const auto& worker_transfers : transfers) {
    for (const TraceTransfer& t : worker_transfers) trace.add(t);
  }
  return trace;
}

}  // namespace pipewright::pipeline
