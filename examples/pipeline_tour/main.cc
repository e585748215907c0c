// The tour's program (docs/tour.md): a tiny two-stage Pipe, its schedule as text, one
// training step, and what each worker did in it. Change one thing (the schedule name, the
// chunks, the checkpoint mode, the balance) and run it again to see what moves:
//   tools/bazel run //examples:pipeline_tour -- 1f1b
#include <algorithm>
#include <cstdio>
#include <string>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/ascii.h"

using namespace pipewright;

int main(int argc, char** argv) {
  const std::string schedule = argc > 1 ? argv[1] : "1f1b";  // any registered schedule with v = 1

  // 1. A model of four children, cut 2 | 2 into two stages on two virtual CPU devices.
  nn::Sequential model{nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 32), nn::Linear(32, 1)};
  pipeline::Pipe pipe(std::move(model), {.balance = {2, 2},
                                         .devices = {Device::cpu(0), Device::cpu(1)},
                                         .chunks = 4,  // micro-batches per mini-batch
                                         .schedule = {.name = schedule}});

  // 2. A mini-batch of 16 rows and a loss per micro-batch.
  const Tensor x = Tensor::ones(Shape{16, 8});
  const Tensor y = Tensor::zeros(Shape{16, 1});
  auto mse = [](const Tensor& out, const Tensor& target) { return nn::mse_loss(out, target); };

  // 3. One step. The result carries the schedule that ran (R actions included) and the trace.
  const pipeline::StepResult r = pipe.train_step(x, y, mse);

  std::printf("schedule %s, %d workers, %d micro-batches (replayed, tF = 1, tB = 2):\n%s\n",
              schedule.c_str(), r.schedule.num_workers, r.schedule.num_microbatches,
              pipeline::to_ascii(r.schedule).c_str());
  std::printf("loss %.6f (per micro-batch:", r.loss);
  for (double l : r.microbatch_losses) std::printf(" %.6f", l);
  std::printf(")\n\nmeasured timeline, microseconds since the step began:\n");

  // 4. The trace: every action each worker ran, in order, with its start and end.
  std::vector<pipeline::TraceEvent> events = r.trace.events();
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return a.worker != b.worker ? a.worker < b.worker : a.start_us < b.start_us;
  });
  for (const pipeline::TraceEvent& e : events) {
    std::printf("  worker %d  %c%d@%d  %8.1f .. %8.1f\n", e.worker,
                pipeline::action_letter(e.kind), e.microbatch, e.stage, e.start_us, e.end_us);
  }
  std::printf("bubble: measured %.2f, theory (p-1)/(m+p-1) = %.2f\n", r.trace.bubble_fraction(),
              pipeline::theoretical_bubble(r.schedule.num_workers, r.schedule.num_microbatches));
  const nn::Tensors params = pipe.parameters();
  const auto with_grad = std::count_if(params.begin(), params.end(),
                                       [](const Tensor& p) { return p.grad().defined(); });
  std::printf("parameters with a gradient: %td of %zu\n", with_grad, params.size());
  return 0;
}
