// Runtime, the device timelines of its steps (StepOptions::device_timeline): each CUDA
// worker's actions traced by the device's clock.
#include <algorithm>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "pipeline/runtime.h"
#include "tensor/stream.h"

namespace pipewright::pipeline {

// Note [Device timelines]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// On a GPU a worker's action returns once its work is issued, so the host's clock traces the
// issue, not the run (a step of small kernels is issued faster than it runs, and the bubble of
// such a trace is the host's). With StepOptions::device_timeline, before the workers start,
// the caller waits for every CUDA worker's stream and its own to drain (a host wait, once per
// step) and records one reference event per device on an idle stream: the device passes it at
// once, so it reached it at the host time reference_us taken right after (give or take a
// launch's latency). Each action then records a timing event where its host start is taken
// (after the stream's wait for the input: on the device a start waits for its input too) and
// one where its compute ends, before it hands its messages over (so a receiver's start comes
// after it on the device, whenever the host gets to record it; a 16-bit message's narrowing
// counts with the send). After the workers are done, execute() waits for each worker's last
// event (finish_device_clocks) and moves every traced action onto its device's clock:
//
//   start_us = reference_us + 1000 · elapsed_ms(reference, start event)
//
// and the same for the end. Workers of one device share a reference, so their order on the
// device is exact; each device is anchored to the host's time line by its own, so GPUs agree
// to a launch's latency. Messages keep their host times (a send is a copy issued on the
// transport's stream).

// The references of Note [Device timelines]: once per step and CUDA device, before the
// workers start.
void Runtime::start_device_clocks(Step& step) {
  step.device_clocks.resize(workers_.size());
  auto timed = [this](size_t w) {
    return workers_[w]->device().is_cuda() &&
           (processes_ == nullptr || processes_->runs_worker(static_cast<int>(w)));
  };
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!timed(w)) continue;
    workers_[w]->compute_stream().synchronize();
    Stream::current(workers_[w]->device()).synchronize();  // the caller's, which they wait for
  }
  std::map<Device, std::pair<std::shared_ptr<Event>, double>> references;
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!timed(w)) continue;
    const Stream& stream = workers_[w]->compute_stream();
    auto& [reference, at_us] = references[stream.device()];
    if (reference == nullptr) {
      reference = std::make_shared<Event>(stream.device(), /*timing=*/true);
      reference->record(stream);  // an idle stream: passed at once
      at_us = micros_since(step.epoch);
    }
    step.device_clocks[w].reference = reference;
    step.device_clocks[w].reference_us = at_us;
  }
}

namespace {

/// The worker's clock when the step traces that worker on its device, else null.
Step::DeviceClock* device_clock(Step& step, int worker) {
  if (step.device_clocks.empty()) return nullptr;
  Step::DeviceClock& clock = step.device_clocks[static_cast<size_t>(worker)];
  return clock.reference != nullptr ? &clock : nullptr;
}

/// A timing event recorded now on `stream`, appended to `events`.
void record_timing(std::vector<Event>& events, const Stream& stream) {
  events.emplace_back(stream.device(), /*timing=*/true);
  events.back().record(stream);
}

}  // namespace

void Runtime::start_action(Step& step, int worker, TraceEvent& event) {
  event.start_us = micros_since(step.epoch);
  if (Step::DeviceClock* clock = device_clock(step, worker)) {
    record_timing(clock->starts, workers_[worker]->compute_stream());
  }
}

void Runtime::end_on_device(Step& step, int worker) {
  Step::DeviceClock* clock = device_clock(step, worker);
  if (clock != nullptr && clock->ends.size() < clock->starts.size()) {
    record_timing(clock->ends, workers_[worker]->compute_stream());
  }
}

// After the workers: every traced action onto its device's clock (the conversion above).
void Runtime::finish_device_clocks(Step& step) {
  for (size_t w = 0; w < step.device_clocks.size(); ++w) {
    Step::DeviceClock& clock = step.device_clocks[w];
    std::vector<TraceEvent>& events = step.events[w];
    const size_t n = std::min({events.size(), clock.starts.size(), clock.ends.size()});
    if (clock.reference == nullptr || n <= clock.converted) continue;
    clock.ends[n - 1].synchronize();  // one stream, in order: every earlier event is done
    const Event& reference = *clock.reference;
    for (size_t i = clock.converted; i < n; ++i) {
      events[i].start_us = clock.reference_us + 1000.0 * reference.elapsed_ms(clock.starts[i]);
      events[i].end_us = clock.reference_us + 1000.0 * reference.elapsed_ms(clock.ends[i]);
    }
    clock.converted = n;
  }
}

}  // namespace pipewright::pipeline
