#include "tests/pipeline/pipe_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "autograd/functions.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pipewright::pipeline::testing {

nn::Sequential small_mlp(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 8), nn::Tanh(),
                        nn::Linear(8, 3));
}

Tensor randn(const Shape& shape, uint64_t seed, Device device) {
  Tensor t = Tensor::empty(shape, {.device = device});
  Generator g(seed);
  g.normal_(t);
  return t;
}

std::vector<Device> cpus(int first, int count) {
  std::vector<Device> out;
  for (int i = 0; i < count; ++i) out.push_back(Device::cpu(first + i));
  return out;
}

double max_diff(const Tensor& a, const Tensor& b) { return ops::max_abs_diff(a, b); }

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

double max_grad_diff(const nn::Module& a, const nn::Module& b) {
  const nn::NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  if (pa.size() != pb.size()) throw std::invalid_argument("modules differ in parameters");
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const Tensor ga = pa[i].second.grad(), gb = pb[i].second.grad();
    if (!ga.defined() && !gb.defined()) continue;
    if (!ga.defined() || !gb.defined()) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, max_diff(ga, gb) / std::max(1.0, max_abs(gb)));
  }
  return worst;
}

PlainRun plain_model_run(nn::Sequential& model, const Tensor& x0, const Tensor& target) {
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = model.forward(x);
  Tensor loss = nn::mse_loss(out, target);
  loss.backward();
  return {out, loss, x.grad()};
}

Tensor Stash::forward(const Tensor& x) {
  stash(name_, tanh_ ? autograd::tanh(x) : x);
  return x;
}

Tensor Pop::forward(const Tensor& y) {
  const Tensor s = pop(name_);
  return mul_ ? autograd::mul(y, s) : autograd::add(y, s);
}

}  // namespace pipewright::pipeline::testing
