// Gradient clipping, learning-rate schedulers and optimizer parameter groups: closed forms,
// resuming, the errors (their values against PyTorch are in transformer_fixture_test.cc).
#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

#include "nn/clip_grad.h"
#include "nn/lr_scheduler.h"
#include "nn/optim.h"
#include "tensor/ops.h"

using namespace pipewright;

namespace {

Tensor param_with_grad(const std::vector<double>& grad) {
  Tensor p = Tensor::zeros({static_cast<int64_t>(grad.size())}, {.dtype = DType::kFloat64});
  p.set_requires_grad(true);
  p.set_grad(Tensor::from_vector(grad));
  return p;
}

}  // namespace

TEST_CASE("clip_grad_norm: closed forms, parameters without grad, no clipping below the bound",
          "[clip]") {
  Tensor a = param_with_grad({3, 0}), b = param_with_grad({0, 4}), none = Tensor::zeros({3});
  none.set_requires_grad(true);
  const nn::Tensors params{a, none, b};
  CHECK(nn::total_grad_norm(params) == 5.0);
  CHECK(nn::total_grad_norm(params, 1.0) == 7.0);
  CHECK(nn::total_grad_norm(params, INFINITY) == 4.0);
  CHECK(std::abs(nn::total_grad_norm(params, 3.0) - std::cbrt(27.0 + 64.0)) < 1e-12);
  CHECK(nn::total_grad_norm({none}) == 0.0);

  CHECK(nn::clip_grad_norm(params, 10.0) == 5.0);  // below the bound: unchanged, bit for bit
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3, 0});
  CHECK(nn::clip_grad_norm(params, 1.0) == 5.0);
  const double coef = 1.0 / (5.0 + 1e-6);
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3 * coef, 0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0, 4 * coef});
  CHECK_FALSE(none.grad().defined());
}

TEST_CASE("clip_grad_norm: non-finite norms and bad arguments", "[clip]") {
  Tensor a = param_with_grad({1, std::numeric_limits<double>::quiet_NaN()});
  CHECK(std::isnan(nn::clip_grad_norm({a}, 1.0)));
  CHECK(std::isnan(a.grad().to_vector<double>()[0]));  // torch's behaviour: NaN spreads
  // The infinity norm too (a max over |g|, which propagates NaN as torch.max does), so
  // error_if_nonfinite refuses it.
  Tensor n = param_with_grad({1, std::numeric_limits<double>::quiet_NaN(), 3});
  CHECK(std::isnan(nn::total_grad_norm({n}, INFINITY)));
  CHECK_THROWS_AS(nn::clip_grad_norm({n}, 1.0, INFINITY, /*error_if_nonfinite=*/true), std::domain_error);
  CHECK(n.grad().to_vector<double>()[2] == 3.0);  // left unchanged
  Tensor b = param_with_grad({1, INFINITY});
  CHECK_THROWS_WITH(nn::clip_grad_norm({b}, 1.0, 2.0, /*error_if_nonfinite=*/true),
                    "clip_grad_norm: the total norm of order 2 of the gradients is inf "
                    "(error_if_nonfinite is set)");
  CHECK(b.grad().to_vector<double>()[0] == 1.0);
  CHECK_THROWS_WITH(nn::total_grad_norm({b}, 0.0),
                    "clip_grad_norm: norm_type must be > 0 (or inf), got 0");
  CHECK_THROWS_WITH(nn::clip_grad_norm({b}, -1.0), "clip_grad_norm: max_norm must be >= 0, got -1");
}

TEST_CASE("clip_grad_norm's halves combine over disjoint parameter sets", "[clip]") {
  Tensor a = param_with_grad({1, 2}), b = param_with_grad({-2, 4}), c = param_with_grad({0.5});
  for (double order : {1.0, 2.0, 2.5, double(INFINITY)}) {
    INFO("order " << order);
    const double share_ab = nn::grad_norm_share({a, b}, order), share_c = nn::grad_norm_share({c}, order);
    const double combined = std::isinf(order) ? std::max(share_ab, share_c) : share_ab + share_c;
    CHECK(std::abs(nn::norm_from_share(combined, order) - nn::total_grad_norm({a, b, c}, order)) <
          1e-12);
  }
}

// Note [One read per norm] (nn/clip_grad.cc): the shares are combined on the device, in
// float64 in the parameters' order, and read once; the total has the host's bits: each
// gradient's own float32 share (read here one by one) added in float64, in order.
TEST_CASE("grad_norm_share: float32 shares added in float64 in order, the host's bits", "[clip]") {
  nn::Tensors params;
  for (int i = 0; i < 5; ++i) {
    std::vector<double> g(static_cast<size_t>(37 + 11 * i));
    for (size_t k = 0; k < g.size(); ++k) {
      g[k] = std::sin(0.7 * static_cast<double>(k) + i) * std::pow(10.0, 3 * (i % 3) - 3);
    }
    Tensor p = Tensor::zeros({static_cast<int64_t>(g.size())});
    p.set_requires_grad(true);
    p.set_grad(Tensor::from_vector(g).to(DType::kFloat32));
    params.push_back(p);
  }
  for (double order : {1.0, 2.0, double(INFINITY)}) {
    INFO("order " << order);
    double want = 0.0;
    for (const Tensor& p : params) {
      const Tensor& g = p.grad();
      const double s = std::isinf(order) ? ops::max(ops::abs(g), 0).item()
                       : order == 2.0    ? ops::sum(ops::square(g)).item()
                                         : ops::sum(ops::abs(g)).item();
      want = std::isinf(order) ? std::max(want, s) : want + s;
    }
    CHECK(nn::grad_norm_share(params, order) == want);
  }
  // A NaN in a middle gradient stays NaN whatever follows, for the maximum too.
  Tensor nan = Tensor::zeros({2});
  nan.set_requires_grad(true);
  nan.set_grad(Tensor::from_vector(std::vector<double>{1.0, std::nan("")}).to(DType::kFloat32));
  const nn::Tensors with_nan{params[0], nan, params[1]};
  for (double order : {1.0, 2.0, double(INFINITY)}) {
    CHECK(std::isnan(nn::grad_norm_share(with_nan, order)));
  }
}

TEST_CASE("WarmupCosineLR, StepLR and ConstantLR: closed forms and resuming", "[lr_scheduler]") {
  Tensor p = Tensor::zeros({1});
  p.set_requires_grad(true);
  nn::SGD opt({p}, {.lr = 1.0});
  nn::WarmupCosineLR schedule(opt, 4, 12, 0.1);
  CHECK(schedule.base_lr() == 1.0);
  CHECK(opt.lr() == 0.25);  // lr_at(0), set by the constructor
  CHECK(schedule.lr_at(3) == 1.0);
  CHECK(schedule.lr_at(4) == 1.0);
  CHECK(std::abs(schedule.lr_at(8) - 0.55) < 1e-15);  // half way down: (1 + 0.1) / 2
  CHECK(schedule.lr_at(12) == 0.1);
  CHECK(schedule.lr_at(1000) == 0.1);
  for (int i = 0; i < 6; ++i) schedule.step();
  CHECK(schedule.last_step() == 6);
  CHECK(opt.lr() == schedule.lr_at(6));
  schedule.set_last_step(9);  // resume
  CHECK(opt.lr() == schedule.lr_at(9));
  CHECK_THROWS_WITH(schedule.lr_at(-1), "LRScheduler: step must be >= 0, got -1");
  CHECK_THROWS_WITH(nn::WarmupCosineLR(opt, 5, 4),
                    "WarmupCosineLR: expected 0 <= warmup_steps <= total_steps, total_steps > 0 "
                    "and min_lr >= 0, got warmup_steps 5, total_steps 4, min_lr 0");

  nn::SGD opt2({p}, {.lr = 2.0});
  nn::StepLR step(opt2, 3, 0.5);
  CHECK(step.lr_at(2) == 2.0);
  CHECK(step.lr_at(3) == 1.0);
  CHECK(step.lr_at(7) == 0.5);
  CHECK_THROWS_AS(nn::StepLR(opt2, 0), std::invalid_argument);

  nn::SGD opt3({p}, {.lr = 3.0});
  nn::ConstantLR constant(opt3, 1.0, 0);  // a constant learning rate
  CHECK(opt3.lr() == 3.0);
  CHECK(constant.lr_at(100) == 3.0);
  CHECK_THROWS_AS(nn::ConstantLR(opt3, 1.5), std::invalid_argument);
}

TEST_CASE("weight_decay_groups splits matrices from vectors", "[optim]") {
  const Tensor w = Tensor::zeros({3, 4}), bias = Tensor::zeros({4}), e = Tensor::zeros({10, 4});
  const std::vector<nn::ParamGroup> groups = nn::weight_decay_groups({w, bias, e}, 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].weight_decay == 0.1);
  CHECK(groups[1].weight_decay == 0.0);
  REQUIRE(groups[0].params.size() == 2);
  CHECK(groups[0].params[0].is_same(w));
  CHECK(groups[0].params[1].is_same(e));
  REQUIRE(groups[1].params.size() == 1);
  CHECK(groups[1].params[0].is_same(bias));
}

TEST_CASE("AdamW parameter groups: per-group decay, state dict round trip, layout checked",
          "[optim]") {
  auto make = [](double value) {
    Tensor t = Tensor::full({2, 2}, value, {.dtype = DType::kFloat64});
    t.set_requires_grad(true);
    return t;
  };
  Tensor a = make(1.0), b = make(1.0);
  nn::AdamW opt({{.params = {a}}, {.params = {b}, .weight_decay = 0.0}}, {.lr = 0.1, .weight_decay = 0.5});
  for (const Tensor& t : {a, b}) t.impl()->grad = Tensor::zeros({2, 2}, {.dtype = DType::kFloat64}).impl_ptr();
  opt.step();  // zero gradients: only the decoupled decay moves a parameter
  CHECK(a.to_vector<double>()[0] == 1.0 * (1 - 0.1 * 0.5));
  CHECK(b.to_vector<double>()[0] == 1.0);

  const nn::NamedTensors state = opt.state_dict();
  auto value = [&](const std::string& key) {
    for (const auto& [k, t] : state) {
      if (k == key) return t.item();
    }
    FAIL("no key " << key);
    return 0.0;
  };
  CHECK(value("param_groups.0.weight_decay") == 0.5);
  CHECK(value("param_groups.1.weight_decay") == 0.0);
  CHECK(value("param_groups.0.num_params") == 1.0);
  CHECK(value("param_groups.1.num_params") == 1.0);

  Tensor a2 = make(1.0), b2 = make(1.0);
  nn::AdamW same({{.params = {a2}}, {.params = {b2}, .weight_decay = 0.3}}, {.lr = 0.1});
  same.load_state_dict(state);
  CHECK(same.state_dict().size() == state.size());
  CHECK(same.options().weight_decay == 0.5);

  nn::AdamW one_group({a2, b2}, {.lr = 0.1});
  CHECK_THROWS_WITH(one_group.load_state_dict(state), Catch::Contains("unexpected key 'param_groups.0.num_params'"));
  nn::AdamW other_split({{.params = {a2, b2}}, {.params = {make(0.0)}}}, {.lr = 0.1});
  CHECK_THROWS_WITH(other_split.load_state_dict(state),
                    "AdamW: parameter group 0 has 2 parameters but the state dict's has 1");
  CHECK_THROWS_WITH(nn::AdamW({{.params = {a2}, .weight_decay = -1.0}}, {}),
                    "AdamW: invalid weight_decay=-1 (must be >= 0)");
}
