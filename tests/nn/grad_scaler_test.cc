// nn::GradScaler against torch.amp.GradScaler's rules: the scale backs off on an overflow and
// grows after growth_interval clean steps; a skipped step changes no parameter and no optimizer
// state; unscale divides the gradients exactly (a power-of-two scale); misuse is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "nn/grad_scaler.h"
#include "nn/optim.h"
#include "tests/compare.h"

using namespace pipewright;
using pipewright::testing::bitwise_equal;

namespace {

/// A parameter of 4 values with .grad = scale * {1, -2, 0.5, 3} (plus `poison` at index 2).
Tensor param_with_grad(double scale, float poison = 0.0f) {
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}).set_requires_grad(true);
  std::vector<float> g{1, -2, 0.5f, 3};
  for (float& v : g) v = static_cast<float>(v * scale);
  if (poison != 0.0f) g[2] = poison;
  p.set_grad(Tensor::from_vector(g));
  return p;
}

}  // namespace

TEST_CASE("unscale divides every gradient by the scale, exactly, and finds no overflow") {
  nn::GradScaler scaler({.init_scale = 1024.0});
  Tensor a = param_with_grad(1024.0), b = param_with_grad(1024.0);
  CHECK_FALSE(scaler.unscale({a, b}));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{1, -2, 0.5f, 3});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{1, -2, 0.5f, 3});
  CHECK_THROWS_WITH(scaler.unscale({a}), Catch::Contains("already unscaled"));
}

TEST_CASE("an inf or NaN anywhere is found; combine decides for every process") {
  const float poison = GENERATE(std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN());
  nn::GradScaler scaler;
  Tensor a = param_with_grad(1.0), b = param_with_grad(1.0, poison);
  CHECK(scaler.unscale({a, b}));
  CHECK(scaler.found_inf());
  // Another process found one although this one did not: combine's maximum decides.
  nn::GradScaler other;
  Tensor c = param_with_grad(1.0);
  double offered = -1;
  CHECK(other.unscale({c}, [&](double found) {
    offered = found;
    return 1.0;
  }));
  CHECK(offered == 0.0);
}

TEST_CASE("a skipped step changes no parameter and no optimizer state; the scale backs off") {
  Tensor p = param_with_grad(65536.0);
  nn::Adam adam({p}, {.lr = 0.1});
  nn::GradScaler scaler;
  CHECK(scaler.step(adam));  // a clean step: unscaled, then stepped
  scaler.update();
  const auto params_before = std::vector<float>(p.to_vector<float>());
  const nn::NamedTensors state_before = adam.state_dict();

  p.set_grad(param_with_grad(65536.0, std::numeric_limits<float>::infinity()).grad());
  CHECK_FALSE(scaler.step(adam));
  CHECK(p.to_vector<float>() == params_before);
  CHECK(bitwise_equal(adam.state_dict(), state_before));
  scaler.update();
  CHECK(scaler.scale() == 32768.0);
  CHECK(scaler.growth_tracker() == 0);
}

TEST_CASE("the scale grows after growth_interval clean steps in a row, and only then") {
  nn::GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  auto clean_step = [&] {
    Tensor p = param_with_grad(scaler.scale());
    scaler.unscale({p});
    scaler.update();
  };
  clean_step();
  clean_step();
  CHECK(scaler.scale() == 8.0);
  CHECK(scaler.growth_tracker() == 2);
  clean_step();
  CHECK(scaler.scale() == 16.0);
  CHECK(scaler.growth_tracker() == 0);
  // An overflow restarts the count.
  clean_step();
  Tensor bad = param_with_grad(1.0, std::numeric_limits<float>::infinity());
  scaler.unscale({bad});
  scaler.update();
  CHECK(scaler.scale() == 8.0);
  clean_step();
  clean_step();
  CHECK(scaler.scale() == 8.0);
}

TEST_CASE("bad options and update without a finding are refused; a disabled scaler is 1") {
  CHECK_THROWS_WITH(nn::GradScaler({.init_scale = 0}), Catch::Contains("init_scale = 0"));
  CHECK_THROWS_WITH(nn::GradScaler({.growth_factor = 1}), Catch::Contains("growth_factor"));
  CHECK_THROWS_WITH(nn::GradScaler({.backoff_factor = 1}), Catch::Contains("backoff_factor"));
  CHECK_THROWS_WITH(nn::GradScaler({.growth_interval = 0}), Catch::Contains("growth_interval"));
  nn::GradScaler scaler;
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("no unscale()"));
  nn::GradScaler off({.enabled = false});
  CHECK(off.scale() == 1.0);
  Tensor p = param_with_grad(1.0, std::numeric_limits<float>::infinity());
  CHECK_FALSE(off.unscale({p}));
}

TEST_CASE("set_found_inf records an unscale done elsewhere, once per step") {
  nn::GradScaler scaler({.init_scale = 8.0, .growth_interval = 1});
  scaler.set_found_inf(false);
  CHECK_THROWS_WITH(scaler.set_found_inf(false), Catch::Contains("already unscaled"));
  scaler.update();
  CHECK(scaler.scale() == 16.0);  // a clean step grows it (growth_interval 1)
  scaler.set_found_inf(true);
  CHECK(scaler.found_inf());
  scaler.update();
  CHECK(scaler.scale() == 8.0);  // an overflow backs it off
  nn::GradScaler off({.enabled = false});
  off.set_found_inf(true);  // ignored: nothing is ever skipped
  CHECK_FALSE(off.found_inf());
  CHECK_FALSE(off.enabled());
}
