// End to end: a Linear-ReLU-Linear MLP trained with a hand-written SGD loop fits a smooth
// toy regression (y = sin(2x₀)·x₁ + 0.5·x₀) on a fixed set of points.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pw = pipewright;
namespace nn = pipewright::nn;
using pw::Tensor;

TEST_CASE("an MLP trained with plain SGD drives a toy regression loss near zero") {
  pw::Generator generator(42);
  pw::GeneratorGuard guard(generator);
  constexpr int64_t kN = 64;
  Tensor x = Tensor::empty({kN, 2});
  generator.uniform_(x, -1.0, 1.0);
  std::vector<float> xs = x.to_vector<float>(), ys;
  for (int64_t i = 0; i < kN; ++i) {
    ys.push_back(std::sin(2 * xs[2 * i]) * xs[2 * i + 1] + 0.5f * xs[2 * i]);
  }
  Tensor y = Tensor::from_vector(ys, {kN, 1});

  nn::Sequential model{nn::Linear(2, 64), nn::ReLU(), nn::Linear(64, 1)};
  const double lr = 0.1;
  double initial = 0.0, final_loss = 0.0;
  for (int step = 0; step < 3000; ++step) {
    model.zero_grad();
    Tensor loss = nn::mse_loss(model(x), y);
    if (step == 0) initial = loss.item();
    final_loss = loss.item();
    loss.backward();
    pw::autograd::NoGradGuard no_grad;
    for (Tensor p : model.parameters()) pw::ops::add_(p, p.grad(), -lr);  // p -= lr·grad
  }
  INFO("initial loss " << initial << ", final loss " << final_loss);
  CHECK(initial > 0.05);
  CHECK(final_loss < 1e-3);
  CHECK(final_loss < initial / 50);
}
