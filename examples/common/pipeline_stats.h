// What the examples report about the pipeline over a stretch of steps (an epoch, or the steps
// between two reports): measured bubble, its replay, each worker's busy time and its
// device's peak memory;
// and the run's closing "steady state" line.
//
//   PipelineMeter meter(devices, processes);       // resets the workers' devices' peaks
//   for (...) meter.add(pipe.train_step(...));
//   PipelineStats stats = meter.finish();          // across processes: combined over ranks
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "distributed/mpi_processes.h"
#include "pipeline/pipe.h"
#include "tensor/device.h"

namespace pipewright::examples {

struct PipelineStats {
  double bubble = 0;                  // measured bubble fraction, mean over the steps
  /// The same steps' schedules replayed with their own measured action durations and free
  /// hand-offs (pipeline::Trace::replayed_bubble), mean over the steps: bubble minus this is
  /// the runtime's share. NaN across processes (a rank's trace holds only its own worker).
  double bubble_replayed = 0;
  std::vector<double> busy_ms;        // per worker: mean milliseconds computing per step
  std::vector<int64_t> peak_bytes;    // per worker: peak allocated bytes of its device (all
                                      // its stages: several under interleaving)
  int64_t replayed_steps = 0;         // steps replayed from a CUDA graph (no action timings:
                                      // the bubble is over the others; NaN if none)
  int64_t graph_pool_bytes = 0;       // --cuda-graphs: the graph's memory pool (part of the
                                      // peaks), set by the trainer
};

class PipelineMeter {
 public:
  /// Starts a stretch: resets the peak counters of `devices`, one per worker. `processes`:
  /// this rank's, or null in one process.
  PipelineMeter(const std::vector<Device>& devices, distributed::MpiProcesses* processes);
  /// Counts one step.
  void add(const pipeline::StepResult& step);
  /// The stretch's numbers; across processes a collective over the job (bubble: the mean
  /// over ranks; busy: the mean over replicas; peaks: the maxima).
  PipelineStats finish() const;

 private:
  std::vector<Device> devices_;
  distributed::MpiProcesses* processes_;
  double bubble_sum_ = 0, replayed_sum_ = 0;
  std::vector<double> busy_us_;
  int64_t steps_ = 0;
  int64_t replayed_steps_ = 0;
};

/// " | bubble 0.281 | peak mem cpu:0 9.0 MiB, cpu:1 6.0 MiB": the tail of a report line.
std::string bubble_and_memory(const PipelineStats& stats, const std::vector<Device>& devices);

/// After the last report: where the idle time of the run's steady state (every stretch but the
/// first, unless there is only one) comes from. Busy times that differ say the cut is uneven;
/// a measured bubble above the replayed one is the runtime's own cost (Note [Replaying a
/// step]). `what` names a stretch ("epoch"), `numbers` their 1-based numbers.
void print_steady_state(std::ostream& out, const std::vector<PipelineStats>& stretches,
                        const std::string& what, const std::vector<int64_t>& numbers,
                        const std::vector<Device>& devices);

}  // namespace pipewright::examples
