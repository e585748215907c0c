// Optimizers against values computed by hand.
//
// Each reference below is the torch.optim documentation's per-step arithmetic written out in
// double precision, element by element, independently of the library (which runs the fused
// kernels). The first cases also pin a few numbers worked out on paper.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "nn/optim.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"

using namespace pipewright;
using Catch::Matchers::Contains;

namespace {

using Vec = std::vector<double>;

Tensor param(const Vec& values, DType dtype = DType::kFloat64, Device device = Device::cpu(0)) {
  Tensor t = Tensor::from_vector(values, Shape{static_cast<int64_t>(values.size())}, device);
  if (dtype != DType::kFloat64) t = t.to(dtype);
  t.set_requires_grad(true);
  return t;
}

void set_grad(Tensor& p, const Vec& g) {
  Tensor grad = Tensor::from_vector(g, Shape{static_cast<int64_t>(g.size())}, p.device());
  if (p.dtype() != DType::kFloat64) grad = grad.to(p.dtype());
  p.set_grad(grad);
}

Vec values(const Tensor& t) { return t.to_vector<double>(); }

// |a - b| <= tol * max(1, |b|) elementwise.
void require_close(const Vec& got, const Vec& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

// Three steps' gradients for a 3-element parameter (fixed, so the references need no model).
const Vec kP0 = {1.0, -2.0, 3.0};
const std::vector<Vec> kGrads = {{0.5, -1.0, 2.0}, {-0.25, 0.75, 1.5}, {1.0, 0.125, -3.0}};

// torch.optim.SGD, written out: g += wd p; buf = first ? g : mu buf + (1 - damp) g;
// g = nesterov ? g + mu buf : buf; p -= lr g.
Vec reference_sgd(double lr, double mu, double damp, double wd, bool nesterov) {
  Vec p = kP0, buf(p.size(), 0.0);
  for (size_t t = 0; t < kGrads.size(); ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = kGrads[t][i] + wd * p[i];
      if (mu != 0) {
        buf[i] = t == 0 ? g : mu * buf[i] + (1 - damp) * g;
        g = nesterov ? g + mu * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
  return p;
}

// torch.optim.Adam / AdamW, written out (t counts from 1):
// Adam: g += wd p.  AdamW: p *= 1 - lr wd.  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
// p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
Vec reference_adam(double lr, double b1, double b2, double eps, double wd, bool decoupled) {
  Vec p = kP0, m(p.size(), 0.0), v(p.size(), 0.0);
  for (size_t step = 1; step <= kGrads.size(); ++step) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = kGrads[step - 1][i];
      if (decoupled) {
        p[i] *= 1 - lr * wd;
      } else {
        g += wd * p[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(b1, step));
      const double v_hat = v[i] / (1 - std::pow(b2, step));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  return p;
}

template <class Opt, class Options>
Vec run_three_steps(const Options& options, DType dtype = DType::kFloat64) {
  Tensor p = param(kP0, dtype);
  Opt opt({p}, options);
  for (const Vec& g : kGrads) {
    opt.zero_grad();
    set_grad(p, g);
    opt.step();
  }
  return values(p);
}

}  // namespace

// An optimizer is neither copied nor moved (it holds per-parameter state indexed like its
// parameters): there is no moved-from optimizer to misuse. A std::unique_ptr<Optimizer> moves.
static_assert(!std::is_move_constructible_v<nn::SGD> && !std::is_move_assignable_v<nn::SGD>);
static_assert(!std::is_move_constructible_v<nn::Adam> && !std::is_move_assignable_v<nn::AdamW>);
static_assert(!std::is_copy_constructible_v<nn::Optimizer>);

TEST_CASE("SGD matches numbers worked out on paper") {
  // p = 1, g = 1 every step, lr 0.1.
  auto run = [](nn::SGDOptions o) {
    Tensor p = param({1.0});
    nn::SGD opt({p}, o);
    Vec trace;
    for (int t = 0; t < 3; ++t) {
      set_grad(p, {1.0});
      opt.step();
      trace.push_back(values(p)[0]);
    }
    return trace;
  };
  // Plain: 0.9, 0.8, 0.7.
  require_close(run({.lr = 0.1}), {0.9, 0.8, 0.7}, 1e-15);
  // Momentum 0.9: buf 1, 1.9, 2.71 -> p 0.9, 0.71, 0.439.
  require_close(run({.lr = 0.1, .momentum = 0.9}), {0.9, 0.71, 0.439}, 1e-15);
  // Nesterov: buf 1, 1.9, 2.71; step g + 0.9 buf = 1.9, 2.71, 3.439 -> 0.81, 0.539, 0.1951.
  require_close(run({.lr = 0.1, .momentum = 0.9, .nesterov = true}), {0.81, 0.539, 0.1951},
                1e-15);
  // Dampening 0.5: buf 1 (first step undamped), 0.9 + 0.5 = 1.4, 1.26 + 0.5 = 1.76.
  require_close(run({.lr = 0.1, .momentum = 0.9, .dampening = 0.5}), {0.9, 0.76, 0.584}, 1e-15);
}

TEST_CASE("SGD variants over three steps match the hand-written reference (float64)") {
  struct Case {
    const char* name;
    nn::SGDOptions o;
  };
  const std::vector<Case> cases = {
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.1, .momentum = 0.9}},
      {"dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
      {"nesterov", {.lr = 0.1, .momentum = 0.9, .nesterov = true}},
      {"weight decay", {.lr = 0.1, .weight_decay = 0.01}},
      {"all", {.lr = 0.2, .momentum = 0.7, .weight_decay = 0.05, .nesterov = true}},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      const Vec want = reference_sgd(c.o.lr, c.o.momentum, c.o.dampening, c.o.weight_decay,
                                     c.o.nesterov);
      require_close(run_three_steps<nn::SGD>(c.o), want, 1e-14);
      require_close(run_three_steps<nn::SGD>(c.o, DType::kFloat32), want, 2e-6);
    }
  }
}

TEST_CASE("Adam and AdamW over three steps match the hand-written reference") {
  SECTION("Adam, defaults but lr") {
    const Vec want = reference_adam(0.1, 0.9, 0.999, 1e-8, 0.0, false);
    require_close(run_three_steps<nn::Adam>(nn::AdamOptions{.lr = 0.1}), want, 1e-13);
    require_close(run_three_steps<nn::Adam>(nn::AdamOptions{.lr = 0.1}, DType::kFloat32), want,
                  2e-6);
  }
  SECTION("Adam with L2 weight decay and other betas") {
    const nn::AdamOptions o{.lr = 0.01, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1};
    require_close(run_three_steps<nn::Adam>(o), reference_adam(0.01, 0.8, 0.99, 1e-6, 0.1, false),
                  1e-13);
  }
  SECTION("AdamW: decoupled weight decay, 1e-2 by default") {
    const Vec want = reference_adam(0.1, 0.9, 0.999, 1e-8, 1e-2, true);
    require_close(run_three_steps<nn::AdamW>(nn::AdamWOptions{.lr = 0.1}), want, 1e-13);
    // The same as Adam with decoupled = true.
    require_close(run_three_steps<nn::Adam>(
                      nn::AdamOptions{.lr = 0.1, .weight_decay = 1e-2, .decoupled = true}),
                  want, 1e-13);
    // And not the same as L2 decay.
    const Vec l2 = reference_adam(0.1, 0.9, 0.999, 1e-8, 1e-2, false);
    REQUIRE(std::abs(want[2] - l2[2]) > 1e-6);
  }
  SECTION("constant gradient: every Adam step moves by lr / (1 + eps)") {
    Tensor p = param({1.0});
    nn::Adam opt({p}, {.lr = 0.1});
    for (int t = 0; t < 3; ++t) {
      set_grad(p, {1.0});
      opt.step();
    }
    require_close(values(p), {1.0 - 0.3 / (1 + 1e-8)}, 1e-15);
  }
}

TEST_CASE("parameters without a grad are skipped and get no state") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  nn::Adam opt({a, b}, {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  opt.step();
  REQUIRE(values(b) == Vec{3.0});
  nn::NamedTensors sd = opt.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, t] : sd) keys.push_back(k);
  REQUIRE(keys == std::vector<std::string>{
                      "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq",
                      "param_groups.0.lr", "param_groups.0.beta1", "param_groups.0.beta2",
                      "param_groups.0.eps", "param_groups.0.weight_decay",
                      "param_groups.0.decoupled"});
  REQUIRE(sd[0].second.dtype() == DType::kInt64);
  REQUIRE(sd[0].second.dim() == 0);
  REQUIRE(sd[0].second.item() == 1.0);
}

namespace {

/// Everything written to std::cerr while it lives.
class CerrCapture {
 public:
  CerrCapture() : old_(std::cerr.rdbuf(text_.rdbuf())) {}
  ~CerrCapture() { std::cerr.rdbuf(old_); }
  std::string str() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::streambuf* old_;
};

}  // namespace

TEST_CASE("a parameter that never gets a gradient is reported once, after 100 steps") {
  // Note [A parameter never trained] (nn/optimizer.h).
  Tensor trained = param({1.0}), forgotten = param({2.0, 3.0}), frozen = param({4.0});
  frozen.set_requires_grad(false);
  nn::SGD opt({trained, forgotten, frozen}, {.lr = 0.1});
  CerrCapture cerr;
  for (int64_t step = 1; step <= 3 * nn::Optimizer::kStepsWithoutGradWarning; ++step) {
    set_grad(trained, {1.0});
    if (step % 2 == 0) {
      opt.step();
    } else {
      opt.step({0, 1, 2});  // a step in parts counts as well
    }
    if (step == nn::Optimizer::kStepsWithoutGradWarning - 1) REQUIRE(cerr.str().empty());
    if (step == nn::Optimizer::kStepsWithoutGradWarning) {
      REQUIRE(cerr.str() ==
              "pipewright: warning: SGD: parameter 1 (shape [2], cpu:0) requires grad but got "
              "no gradient in the last 100 steps, so it is not being trained. Either the model "
              "does not use it, or an operation between it and the loss recorded no history "
              "(Tensor's own methods such as reshape, to and detach record none; the functions "
              "of autograd/ do). To freeze it on purpose, set requires_grad(false). (Said "
              "once.)\n");
    }
  }
  REQUIRE(opt.steps_without_grad() ==
          std::vector<int64_t>{0, 3 * nn::Optimizer::kStepsWithoutGradWarning, 0});
  REQUIRE(cerr.str().find("(Said once.)") == cerr.str().rfind("(Said once.)"));  // once
  REQUIRE(values(forgotten) == Vec{2.0, 3.0});
}

TEST_CASE("a parameter that gets a gradient now and then is never reported") {
  Tensor sometimes = param({1.0});
  nn::SGD opt({sometimes}, {.lr = 0.1});
  CerrCapture cerr;
  for (int64_t step = 1; step <= 3 * nn::Optimizer::kStepsWithoutGradWarning; ++step) {
    if (step % (nn::Optimizer::kStepsWithoutGradWarning - 1) == 0) set_grad(sometimes, {1.0});
    opt.step();
    opt.zero_grad();
  }
  REQUIRE(cerr.str().empty());
  REQUIRE(opt.steps_without_grad()[0] < nn::Optimizer::kStepsWithoutGradWarning);
}

TEST_CASE("zero_grad sets grads to undefined") {
  Tensor p = param({1.0});
  nn::SGD opt({p}, {.lr = 0.1});
  set_grad(p, {1.0});
  opt.zero_grad();
  REQUIRE_FALSE(p.grad().defined());
  opt.step();  // nothing to do
  REQUIRE(values(p) == Vec{1.0});
}

TEST_CASE("state tensors live on each parameter's device") {
  Tensor a = param({1.0}, DType::kFloat32, Device::cpu(0));
  Tensor b = param({2.0}, DType::kFloat32, Device::cpu(1));
  nn::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, {1.0});
  set_grad(b, {1.0});
  opt.step();
  nn::NamedTensors sd = opt.state_dict();
  REQUIRE(sd[0].first == "state.0.momentum_buffer");
  REQUIRE(sd[0].second.device() == Device::cpu(0));
  REQUIRE(sd[1].first == "state.1.momentum_buffer");
  REQUIRE(sd[1].second.device() == Device::cpu(1));
  require_close(values(b), {1.9}, 1e-6);
}

TEST_CASE("options are validated with the offending values named") {
  Tensor p = param({1.0});
  auto sgd = [&](nn::SGDOptions o) { nn::SGD opt({p}, o); };
  auto adam = [&](nn::AdamOptions o) { nn::Adam opt({p}, o); };
  REQUIRE_THROWS_WITH(sgd({.lr = -0.1}), Contains("lr=-0.1"));
  REQUIRE_THROWS_WITH(sgd({.lr = NAN}), Contains("lr=nan"));
  REQUIRE_THROWS_WITH(sgd({.momentum = -1}), Contains("momentum=-1"));
  REQUIRE_THROWS_WITH(sgd({.weight_decay = -0.5}), Contains("weight_decay=-0.5"));
  REQUIRE_THROWS_WITH(sgd({.lr = 0.1, .nesterov = true}),
                      Contains("nesterov") && Contains("momentum=0"));
  REQUIRE_THROWS_WITH(sgd({.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                      Contains("dampening=0.1"));
  REQUIRE_THROWS_AS(sgd({.lr = -1}), std::invalid_argument);
  REQUIRE_THROWS_WITH(adam({.lr = -1e-3}), Contains("lr=-0.001"));
  REQUIRE_THROWS_WITH(adam({.betas = {1.0, 0.999}}), Contains("beta1=1"));
  REQUIRE_THROWS_WITH(adam({.betas = {0.9, -0.1}}), Contains("beta2=-0.1"));
  REQUIRE_THROWS_WITH(adam({.eps = -1e-8}), Contains("eps=-1e-08"));
  REQUIRE_THROWS_WITH(adam({.weight_decay = -1}), Contains("weight_decay=-1"));
  REQUIRE_THROWS_WITH(nn::AdamW({p}, {.weight_decay = -1}), Contains("AdamW"));

  nn::SGD opt({p}, {.lr = 0.1});
  REQUIRE_THROWS_WITH(opt.set_lr(-2), Contains("lr=-2"));
  REQUIRE(opt.lr() == 0.1);
  opt.set_lr(0.5);
  REQUIRE(opt.lr() == 0.5);
}

TEST_CASE("parameter lists and grads are validated") {
  REQUIRE_THROWS_WITH(nn::SGD({}, {}), Contains("empty parameter list"));
  Tensor p = param({1.0});
  REQUIRE_THROWS_WITH(nn::SGD({p, p}, {}), Contains("parameter 1 is the same tensor as parameter 0"));
  REQUIRE_THROWS_WITH(nn::SGD({Tensor::zeros({2}, {.dtype = DType::kInt64})}, {}),
                      Contains("int64"));
  REQUIRE_THROWS_WITH(nn::SGD({p, Tensor()}, {}), Contains("parameter 1 is an undefined"));

  // A grad of the wrong shape throws before any parameter changes.
  Tensor q = param({1.0, 2.0});
  nn::SGD opt({p, q}, {.lr = 0.1});
  set_grad(p, {1.0});
  set_grad(q, {1.0, 2.0, 3.0});
  REQUIRE_THROWS_WITH(opt.step(), Contains("parameter 1") && Contains("[3]") && Contains("[2]"));
  REQUIRE(values(p) == Vec{1.0});
  // A step in parts names each parameter once (one multi-tensor kernel would update a listed
  // one twice at once); past the list is out of range. Nothing changes either way.
  set_grad(q, {1.0, 2.0});
  REQUIRE_THROWS_WITH(opt.step({0, 1, 0}), Contains("SGD: parameter 0 is listed twice"));
  REQUIRE_THROWS_AS(opt.step({0, 2}), std::out_of_range);
  REQUIRE(values(p) == Vec{1.0});
  REQUIRE(values(q) == Vec{1.0, 2.0});
}

namespace {

// Runs `steps` steps of gradients derived from the step number and the parameter value (so
// a wrong resumed state would show).
void train(nn::Optimizer& opt, std::vector<Tensor>& params, int first, int steps) {
  for (int s = first; s < first + steps; ++s) {
    opt.zero_grad();
    for (size_t k = 0; k < params.size(); ++k) {
      Vec g = values(params[k]);
      for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(g[i] * (s + 1) + k + i);
      set_grad(params[k], g);
    }
    if (s == first + 1) params[1].set_grad(Tensor());  // one parameter skips a step
    opt.step();
  }
}

std::vector<Tensor> clones(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.clone().set_requires_grad(true));
  return out;
}

void require_bitwise(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    REQUIRE(a[k].dtype() == b[k].dtype());
    REQUIRE(values(a[k]) == values(b[k]));
  }
}

template <class Opt, class Options>
void check_resume(const Options& options, bool through_file) {
  std::vector<Tensor> ps = {param({0.3, -1.2, 2.0}, DType::kFloat32),
                            param({0.7, 0.1}, DType::kFloat32, Device::cpu(1))};
  Opt original(ps, options);
  train(original, ps, 0, 3);

  // Snapshot, then resume a second optimizer over copies of the parameters.
  nn::NamedTensors snapshot = original.state_dict();
  std::vector<Tensor> resumed_ps = clones(ps);
  if (through_file) {
    const char* dir = std::getenv("TEST_TMPDIR");
    const std::string path = std::string(dir ? dir : "/tmp") + "/optim_state_" +
                             std::to_string(::getpid()) + ".safetensors";
    nn::save_safetensors(path, snapshot);
    snapshot = nn::load_safetensors(path).tensors;
    std::remove(path.c_str());
  }
  Opt resumed(resumed_ps, Options{});
  resumed.load_state_dict(snapshot);

  train(original, ps, 3, 3);
  train(resumed, resumed_ps, 3, 3);
  require_bitwise(ps, resumed_ps);
  nn::NamedTensors a = original.state_dict(), b = resumed.state_dict();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].first == b[i].first);
    REQUIRE(a[i].second.device() == b[i].second.device());
    REQUIRE(ops::equal(a[i].second, b[i].second));
  }
}

}  // namespace

TEST_CASE("state_dict round trip resumes bitwise-identically") {
  SECTION("SGD nesterov") {
    check_resume<nn::SGD>(nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true}, false);
  }
  SECTION("SGD through a safetensors file") {
    check_resume<nn::SGD>(nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3},
                          true);
  }
  SECTION("Adam") { check_resume<nn::Adam>(nn::AdamOptions{.lr = 0.01, .weight_decay = 0.1}, false); }
  SECTION("AdamW through a safetensors file") {
    check_resume<nn::AdamW>(nn::AdamWOptions{.lr = 0.01, .betas = {0.8, 0.95}}, true);
  }
}

TEST_CASE("state_dict is a snapshot and restores the hyperparameters") {
  Tensor p = param({1.0});
  nn::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, {1.0});
  opt.step();
  nn::NamedTensors sd = opt.state_dict();
  opt.step();
  REQUIRE(values(sd[0].second) == Vec{1.0});  // the buffer after one step, not two

  Tensor q = param({1.0});
  nn::SGD other({q}, {.lr = 0.5});
  other.load_state_dict(sd);
  REQUIRE(other.lr() == 0.1);
  REQUIRE(other.options().momentum == 0.9);
}

TEST_CASE("load_state_dict rejects bad state and changes nothing") {
  Tensor p = param({1.0, 2.0});
  nn::Adam opt({p}, {.lr = 0.1});
  set_grad(p, {1.0, 1.0});
  opt.step();
  const nn::NamedTensors good = opt.state_dict();

  auto with = [&](const std::string& key, Tensor t) {
    nn::NamedTensors sd;
    bool replaced = false;
    for (const auto& [k, v] : good) {
      if (k == key) {
        replaced = true;
        if (t.defined()) sd.emplace_back(k, t);
      } else {
        sd.emplace_back(k, v);
      }
    }
    if (!replaced) sd.emplace_back(key, t);
    return sd;
  };
  nn::Adam fresh({param({5.0, 6.0})}, {.lr = 0.3});
  REQUIRE_THROWS_WITH(fresh.load_state_dict(with("state.0.momentum_buffer", Tensor::zeros({2}))),
                      Contains("unexpected key 'state.0.momentum_buffer'"));
  REQUIRE_THROWS_WITH(fresh.load_state_dict(with("state.1.exp_avg", Tensor::zeros({2}))),
                      Contains("names parameter 1 but the optimizer has 1 parameters"));
  REQUIRE_THROWS_WITH(fresh.load_state_dict(with("state.0.exp_avg",
                                                 Tensor::zeros({3}, {.dtype = DType::kFloat64}))),
                      Contains("'state.0.exp_avg' has shape [3]"));
  REQUIRE_THROWS_WITH(fresh.load_state_dict(with("state.0.exp_avg", Tensor::zeros({2}))),
                      Contains("dtype float32"));
  REQUIRE_THROWS_WITH(fresh.load_state_dict(with("state.0.exp_avg_sq", Tensor())),
                      Contains("missing keys") && Contains("state.0.exp_avg_sq"));
  REQUIRE_THROWS_WITH(fresh.load_state_dict(with("param_groups.0.lr", Tensor())),
                      Contains("missing keys") && Contains("param_groups.0.lr"));
  REQUIRE_THROWS_WITH(
      fresh.load_state_dict(with("state.0.step",
                                 Tensor::from_vector(std::vector<int64_t>{0}, Shape{}))),
      Contains("'state.0.step' = 0"));
  REQUIRE_THROWS_WITH(
      fresh.load_state_dict(with("param_groups.0.beta1",
                                 Tensor::scalar(1.5, {.dtype = DType::kFloat64}))),
      Contains("beta1=1.5"));
  REQUIRE_THROWS_WITH(fresh.load_state_dict(with("state.00.exp_avg", Tensor::zeros({2}))),
                      Contains("unexpected key 'state.00.exp_avg'"));
  // Nothing was committed by the failed loads.
  REQUIRE(fresh.lr() == 0.3);
  REQUIRE(fresh.state_dict().size() == 6);  // hyperparameters only
}
