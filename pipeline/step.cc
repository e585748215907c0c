#include "pipeline/step.h"

namespace pipewright::pipeline {

Step::Step(int num_stages, int num_workers, MicroBatches inputs_, CellMode mode,
           std::vector<std::vector<char>> checkpointed)
    : num_stages(num_stages),
      num_workers(num_workers),
      num_microbatches(inputs_.count()),
      mode(mode),
      checkpointed(std::move(checkpointed)),
      inputs(std::move(inputs_)),
      output_grads(num_microbatches),
      cells(num_stages),
      outputs(num_microbatches),
      losses(num_microbatches, 0.0),
      loss_grads(num_microbatches),
      input_grads(num_microbatches),
      counters(num_stages),
      events(num_workers),
      transport_(std::make_unique<InProcessTransport>()) {
  for (auto& row : cells) row.resize(num_microbatches);
}

void Step::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::move(error);
  }
  failed_.store(true, std::memory_order_release);
  transport_->cancel();
}

std::exception_ptr Step::error() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  return error_;
}

Trace Step::trace() const {
  Trace trace(num_workers);
  for (const auto& worker_events : events) {
    for (const TraceEvent& e : worker_events) trace.add(e);
  }
  return trace;
}

}  // namespace pipewright::pipeline
