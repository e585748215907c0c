// Trains y = 2·x0 − x1 + 0.5 with a two-stage Pipe (1F1B, 4 micro-batches) on two CPU
// devices through pipewright's public target only; exits non-zero unless the loss falls to
// under a tenth of its first value in 30 steps.
#include <cstdio>
#include <vector>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim_sgd.h"
#include "pipeline/pipe.h"

using namespace pipewright;

int main() {
  const int n = 32;
  std::vector<float> xs, ys;
  for (int i = 0; i < n; ++i) {
    const float x0 = static_cast<float>(i % 8) / 8 - 0.5f, x1 = static_cast<float>(i / 8) / 4;
    xs.insert(xs.end(), {x0, x1});
    ys.push_back(2 * x0 - x1 + 0.5f);
  }
  const Tensor x = Tensor::from_vector(xs, Shape{n, 2});
  const Tensor y = Tensor::from_vector(ys, Shape{n, 1});

  nn::Sequential model{nn::Linear(2, 16), nn::Tanh(), nn::Linear(16, 1)};
  pipeline::Pipe pipe(std::move(model), {.balance = {2, 1},
                                         .devices = {Device::cpu(0), Device::cpu(1)},
                                         .chunks = 4});
  nn::SGD opt(pipe.parameters(), {.lr = 0.1});
  auto mse = [](const Tensor& out, const Tensor& target) { return nn::mse_loss(out, target); };

  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    last = pipe.train_step(x, y, mse, "1f1b").loss;
    if (step == 0) first = last;
    opt.step();
  }
  std::printf("loss: first %.4f, last %.4f\n", first, last);
  return last < first / 10 ? 0 : 1;
}
