// "Write your own schedule" (docs/tour.md): a schedule is plain data, so build one by hand,
// check it, replay it, draw it, then train with it.
//
// The schedule: two workers, four micro-batches, 1F1B's order with every backward split
// into I (input gradient) and W (weight gradient), and the last stage's W's all deferred to
// the end of its list, where they fill the time it would otherwise wait for worker 0 (ZB-H1's
// idea in its smallest form). Exits non-zero unless the step's loss and gradients equal
// GPipe's on the same model.
//   tools/bazel run //examples:custom_schedule -- /tmp/custom.svg
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/ascii.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/schedule/svg.h"
#include "pipeline/schedule/validate.h"

using namespace pipewright;
using pipeline::Action;
using pipeline::ActionKind;

int main(int argc, char** argv) {
  // 1. Build: per worker, the ordered list of actions {stage, kind, micro-batch}.
  const int m = 4;
  pipeline::Schedule s{.name = "custom", .num_workers = 2, .num_stages = 2,
                       .num_microbatches = m, .stage_worker = {0, 1}, .actions = {{}, {}}};
  auto add = [&](int worker, ActionKind kind, int j) {
    s.actions[worker].push_back(Action{.stage = worker, .kind = kind, .microbatch = j});
  };
  add(0, ActionKind::kForward, 0);  // worker 0: F0 F1, then I and F alternate, then W's
  add(0, ActionKind::kForward, 1);
  for (int j = 0; j < m; ++j) {
    add(0, ActionKind::kBackwardInput, j);
    add(0, ActionKind::kBackwardWeight, j);
    if (j + 2 < m) add(0, ActionKind::kForward, j + 2);
  }
  for (int j = 0; j < m; ++j) {  // worker 1: F and I alternate, the W's at the end
    add(1, ActionKind::kForward, j);
    add(1, ActionKind::kBackwardInput, j);
  }
  for (int j = 0; j < m; ++j) add(1, ActionKind::kBackwardWeight, j);

  // 2. Validate: every cell's actions present once, in a deadlock-free order (throws otherwise).
  pipeline::validate(s);

  // 3. Replay with unit costs, print the timeline, and draw it.
  const pipeline::Costs costs = pipeline::Costs::split(1, 1, 1);
  const pipeline::ScheduleReplay sim = pipeline::replay_schedule(s, costs);
  std::printf("%s\nmakespan %.1f, bubble %.2f\n", pipeline::to_ascii(s, costs).c_str(),
              sim.makespan, sim.bubble_fraction);
  if (argc > 1) std::ofstream(argv[1]) << pipeline::to_svg(s, costs);

  // 4. Train with it, then with GPipe on the same weights: same loss, same gradients.
  pipeline::Pipe pipe(nn::Sequential{nn::Linear(4, 16), nn::Tanh(), nn::Linear(16, 1)},
                      {.balance = {2, 1}, .devices = {Device::cpu(0), Device::cpu(1)},
                       .chunks = m});
  std::vector<float> xs(32);
  for (int i = 0; i < 32; ++i) xs[i] = static_cast<float>(i) / 32;
  const Tensor x = Tensor::from_vector(xs, Shape{8, 4});
  const Tensor y = Tensor::ones(Shape{8, 1});
  auto mse = [](const Tensor& out, const Tensor& target) { return nn::mse_loss(out, target); };
  auto gradients = [&] {
    std::vector<std::vector<float>> g;
    for (const Tensor& p : pipe.parameters()) g.push_back(p.grad().to_vector<float>());
    return g;
  };
  const double loss = pipe.train_step(x, y, mse, {.schedule = s}).loss;  // this step: s
  const std::vector<std::vector<float>> ours = gradients();
  for (Tensor& p : pipe.parameters()) p.set_grad(Tensor());
  const double reference = pipe.train_step(x, y, mse).loss;  // the pipe's own: GPipe
  const std::vector<std::vector<float>> gpipe = gradients();
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    for (size_t k = 0; k < ours[i].size(); ++k) {
      worst = std::max(worst, static_cast<double>(std::fabs(ours[i][k] - gpipe[i][k])));
    }
  }
  std::printf("loss %.6f (gpipe %.6f), largest gradient difference %.2g\n", loss, reference,
              worst);
  return std::fabs(loss - reference) < 1e-6 && worst < 1e-6 ? 0 : 1;
}
